"""The shared parts of the state-version tests (tests/providers/test_state_version_property.py and
test_state_version_cases.py): a backend under test (World), what is asked of it after every step
(Probes, observe) and a Refresh by a second caller held between its listing and applying it
(HeldRefresh). The backends themselves are built in tests/support/state_version_worlds.py.

A front may cache NodeGroupTargetSize, NodeGroupForNode and NodeGroupGetOptions (and NodeGroups)
for one state version, so these helpers read exactly those answers from the provider itself.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cloudprovider_grpc.core.errors import ProviderError
from cloudprovider_grpc.emulators import EmulatorServer
from cloudprovider_grpc.providers.contract import AutoscalingOptions, NodeRef
from cloudprovider_grpc.providers.driver import CONTROL_PLANE_LABELS
from cloudprovider_grpc.providers.machinery.base import GroupProvider
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from tests.support.servers import ManualClock

NO_GROUP = "no-such-group"
NEVER = "never-seen"  # the probe value standing for every value not seen yet (see observe)
DEFAULTS = (
    AutoscalingOptions(),
    AutoscalingOptions(scale_down_unneeded_time=42.0, max_node_provision_time=7.0),
)
CONTROL_PLANE = {CONTROL_PLANE_LABELS[1]: ""}

Key = tuple[str, str]


@dataclass
class World:
    """One backend under test: its provider on a manual clock (workers inline), the cloud-side
    actions the model check may take, and how to build the label-only nodes it probes."""

    name: str
    provider: GroupProvider[Any]
    clock: ManualClock
    cloud_actions: dict[str, Callable[[random.Random], None]] = field(default_factory=dict)
    #: extra probe kinds: kind -> (values seen so far, how a node of that kind is built)
    label_probes: dict[str, tuple[Callable[[], set[str]], Callable[[str], NodeRef]]] = field(
        default_factory=dict
    )
    emulator: EmulatorServer | None = None
    #: a Refresh of a second caller, listed but not applied yet (see HeldRefresh)
    held: list[HeldRefresh] = field(default_factory=list)
    #: where that Refresh pauses: after its listing, or before it where the driver's listing itself
    #: replaces what the label fallbacks read (the version moves when the listing is applied, a few
    #: lines later; a pause in between would show answers changed under an unchanged version)
    hold_after_listing: bool = True

    def stop(self) -> None:
        while self.held:
            self.held.pop().release()
        self.provider.stop(1.0)
        if self.emulator is not None:
            self.emulator.stop()


# ---------------------------------------------------------------------------------- observing


def _answer(fn: Callable[[], object]) -> object:
    try:
        return ("ok", fn())
    except ProviderError as exc:  # the kind only: messages name the id asked about
        return ("error", type(exc).__name__)


def _node(kind: str, value: str) -> NodeRef:
    if kind == "id":
        return NodeRef(value)
    if kind == "name":
        return NodeRef("", value)
    if kind == "control-plane":
        return NodeRef(value, value, labels=CONTROL_PLANE)
    raise AssertionError(kind)


@dataclass
class Probes:
    """Everything asked after each step; sets only grow, so a value once seen is asked forever."""

    values: dict[str, set[str]] = field(default_factory=dict)

    def gather(self, world: World) -> None:
        p = world.provider
        with p.core.lock:
            ids = set(p.core.index.by_id)
            names = set(p.core.index.by_name)
            for gid in list(p.core.groups):
                ids.update(i.id for i in p.nodes(gid))
            groups = {g.id for g in p.node_groups()}
        for kind, new in (("id", ids), ("name", names), ("control-plane", ids), ("group", groups)):
            self.values.setdefault(kind, set()).update(new)
        for kind, (seen, _) in world.label_probes.items():
            self.values.setdefault(kind, set()).update(seen())


def observe(world: World, probes: Probes) -> dict[Key, object]:
    """Every versioned answer for every probe, plus one probe per kind for a value never seen
    (NEVER): a value first seen after a step answered before it exactly as NEVER did."""
    p = world.provider
    out: dict[Key, object] = {("node-groups", ""): tuple(p.node_groups())}
    for gid in [*probes.values.get("group", ()), NO_GROUP, NEVER]:
        out[("target", gid)] = _answer(partial(p.target_size, gid))
        for i, defaults in enumerate(DEFAULTS):
            out[(f"options{i}", gid)] = _answer(partial(p.options, gid, defaults))
    for kind in ("id", "name", "control-plane"):
        for value in [*probes.values.get(kind, ()), NEVER]:
            out[(kind, value)] = p.node_group_for_node(_node(kind, value))
    for kind, (_, make) in world.label_probes.items():
        for value in [*probes.values.get(kind, ()), NEVER]:
            out[(kind, value)] = p.node_group_for_node(make(value))
    return out


class HeldRefresh:
    """A Refresh by a second caller, on its own thread, paused between its listing and applying it:
    what two concurrent Refresh callers do when the older listing comes back last. `release()`
    lets it apply and waits for it."""

    def __init__(self, provider: GroupProvider[Any], *, after_listing: bool = True) -> None:
        self.listed = threading.Event()
        self._go = threading.Event()
        self.error: BaseException | None = None
        method = "list_machines" if isinstance(provider, MachineProvider) else "list_pools"
        driver = provider.driver
        original = getattr(driver, method)

        def held() -> Any:
            setattr(driver, method, original)  # only this caller's listing is held
            if not after_listing:  # numbered (as started) now, listed at release: newer data, older number
                self.listed.set()
                self._go.wait(30)
                return original()
            try:
                return original()
            finally:
                self.listed.set()
                self._go.wait(30)

        setattr(driver, method, held)
        self._thread = threading.Thread(target=self._run, args=(provider,), daemon=True)
        self._thread.start()
        if not self.listed.wait(30):
            raise AssertionError("the held Refresh never listed")

    def _run(self, provider: GroupProvider[Any]) -> None:
        try:
            provider.refresh()
        except ProviderError as exc:
            self.error = exc
        finally:
            self.listed.set()  # a Refresh that failed before listing

    def release(self) -> None:
        self._go.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the held Refresh did not finish"


def _groups(p: GroupProvider[Any]) -> list[str]:
    return [g.id for g in p.node_groups()]
