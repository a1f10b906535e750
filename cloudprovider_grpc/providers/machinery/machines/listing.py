"""How a machine listing is folded into the machine shape's groups, and what expires.

Every Refresh reconciles each group with the cloud: creations whose token a listed machine carries
are resolved (and deleted again if CA cancelled them meanwhile), untokened clouds adopt new machines
for creations whose outcome was lost, a token found on two machines deletes the surplus one, and
machines gone from the cloud become tombstones (so DeleteNodes for them is done, not an error).
Creations whose outcome stayed unknown, or that failed, expire after `failed_ttl`.
"""

from __future__ import annotations

import logging
import re

from cloudprovider_grpc.core.clouderrors import CloudError, InstanceError
from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.providers.contract import InstanceState
from cloudprovider_grpc.providers.driver import Machine, MachineDriver, MachineListing
from cloudprovider_grpc.providers.machinery.group_core import GroupCore
from cloudprovider_grpc.providers.machinery.group_state import ListingSpan, takes_listing
from cloudprovider_grpc.providers.machinery.machines.core import (
    Creation,
    CreationStatus,
    MachineGroupState,
    placeholder_id,
)
from cloudprovider_grpc.providers.machinery.machines.workers import MachineWorkers

log = logging.getLogger(__name__)


class MachineListingFold:
    """The machine shape's listing call and what each listing changes. Handed the group core whose
    groups it folds listings into, the driver, and the workers that delete surplus machines."""

    def __init__(
        self, core: GroupCore[MachineGroupState], driver: MachineDriver, workers: MachineWorkers
    ) -> None:
        self._core = core
        self._driver = driver
        self._workers = workers

    def _placeholder(self, token: str) -> str:
        return placeholder_id(self._driver.id_prefix, token)

    def listing(self) -> MachineListing:
        try:
            listing = self._driver.list_machines()
        except CloudError as exc:
            raise Unavailable(f"{self._core.name}: listing machines failed: {exc.message}") from exc
        return listing if isinstance(listing, MachineListing) else MachineListing(listing)

    def apply(self, listing: MachineListing, started: float, span: ListingSpan) -> None:
        listed: dict[str, dict[str, Machine]] = {gid: {} for gid in self._core.groups}
        for m in listing:
            if m.group in listed:
                listed[m.group][m.id] = m
        now = self._core.clock()
        for gid, state in self._core.groups.items():
            if not takes_listing(state, span):
                continue
            failure = listing.failed.get(gid)
            self._core.note_listing_error(state, failure)
            if failure is not None:
                continue  # keep what we knew; its creations and deletions go on in the background
            fresh = listed[gid]
            self._delete_duplicates(state, fresh, now)
            for m in fresh.values():
                if m.id in state.deleting:
                    continue
                creation = state.creations.get(m.token) if m.token else None
                if creation is not None:  # our creation landed (maybe after a timeout or a restart)
                    self._resolve_creation(state, creation, m, now)
            if not self._driver.create_carries_token:
                self._adopt_untokened(state, fresh, now)
            # keep machines our own create returned after this listing started: the listing may predate them
            for mid, m in state.machines.items():
                if mid not in fresh and state.created_locally.get(mid, -1.0) >= started:
                    fresh[mid] = m
            for mid in set(state.machines) - set(fresh):
                state.tombstones[mid] = now
                state.deleting.pop(mid, None)
            state.created_locally = {k: v for k, v in state.created_locally.items() if k not in listed[gid]}
            state.machines = fresh
            state.listed_once = True
            state.baseline = None  # the listing itself is the baseline from now on

    def _resolve_creation(self, state: MachineGroupState, creation: Creation, m: Machine, now: float) -> None:
        del state.creations[creation.token]
        state.resolved[creation.token] = m.id
        if creation.cancelled and m.id not in state.deleting:
            state.deleting[m.id] = now
            self._workers.submit_delete(m)

    def _adopt_untokened(self, state: MachineGroupState, fresh: dict[str, Machine], now: float) -> None:
        """Clouds whose create carries no token: each creation whose outcome is unknown adopts one
        machine of the group that no listing showed before and no create of ours returned (oldest
        id first). A machine someone else created at the same moment can be adopted instead of
        ours; that is the price of an API without idempotency, and it never doubles a machine.
        While a create of ours is in flight, nothing is adopted: the cloud may list its machine
        before its answer names it, and that machine is the running create's, not the lost one's
        (taken for the lost one's, two creations would collapse into one machine and the target
        CA sees would drop by one)."""
        waiting = [c for c in state.creations.values() if c.status == CreationStatus.UNKNOWN]
        if not waiting or (not state.listed_once and state.baseline is None):
            # the first listing of a group after a start is the baseline newcomers are told from,
            # unless the journal kept the one from before the restart
            state.unadopted = set()
            return
        known = known_machines(state)
        newcomers = sorted(
            (
                m
                for mid, m in fresh.items()
                if _key(m) not in known and mid not in known and not m.token and mid not in state.deleting
            ),
            key=lambda m: _natural(m.id),
        )
        if any(c.status == CreationStatus.INFLIGHT for c in state.creations.values()):
            state.unadopted = {m.id for m in newcomers}  # still newcomers at the next listing
            return
        state.unadopted = set()
        for creation, machine in zip(waiting, newcomers, strict=False):
            log.info(
                "node group %s: adopting %s for the create whose outcome was unknown",
                self._core.shown(state.config.id),
                machine.id,
            )
            self._resolve_creation(state, creation, machine, now)

    def _delete_duplicates(self, state: MachineGroupState, fresh: dict[str, Machine], now: float) -> None:
        """Keep one machine per creation token and delete the others.

        Most cloud APIs have no idempotency key. A create that timed out can still be carried out
        by the cloud after a retry looked its token up, found nothing and created again, leaving
        one token on two machines. The extra one is provably ours and provably surplus: the one we
        already know (or else the oldest id) stays, the others go through the normal delete path,
        which also takes them out of the target at once."""
        by_token: dict[str, list[Machine]] = {}
        for m in fresh.values():
            if m.token and m.state != InstanceState.DELETING:
                by_token.setdefault(m.token, []).append(m)
        for token, same in by_token.items():
            if len(same) < 2:
                continue
            known = state.resolved.get(token)
            keeper = next((m for m in same if m.id == known), None) or min(same, key=lambda m: _natural(m.id))
            for extra in same:
                if extra is keeper or extra.id in state.deleting:
                    continue
                log.warning(
                    "node group %s: %s duplicates %s (creation token %s); deleting it",
                    self._core.shown(state.config.id),
                    extra.id,
                    keeper.id,
                    token,
                )
                state.deleting[extra.id] = now
                self._workers.submit_delete(extra)

    def expire(self, now: float) -> None:
        for state in self._core.groups.values():
            for token, c in list(state.creations.items()):
                if (
                    c.status == CreationStatus.UNKNOWN
                    and c.unknown_since is not None
                    and now - c.unknown_since >= self._core.tunables.failed_ttl
                ):
                    # untokened cloud: no new machine appeared; fail visibly so CA backs off and asks again
                    c.status, c.failed_at = CreationStatus.FAILED, now
                    c.error = InstanceError(
                        "CREATE_OUTCOME_UNKNOWN",
                        f"no new machine appeared within {self._core.tunables.failed_ttl:.0f}s of a create "
                        "whose answer was lost",
                    )
                    log.error("node group %s: %s", self._core.shown(c.group), c.error.message)
                if c.status == CreationStatus.FAILED and now - c.failed_at >= self._core.tunables.failed_ttl:
                    log.info(
                        "node group %s: dropping failed creation %s",
                        self._core.shown(c.group),
                        self._placeholder(token),
                    )
                    del state.creations[token]
                    state.tombstones[self._placeholder(token)] = now
                    if not any(x.status == CreationStatus.FAILED for x in state.creations.values()):
                        self._core.activity.expired(c.group)
            state.resolved = {
                t: mid
                for t, mid in state.resolved.items()
                if mid in state.machines or mid in state.tombstones
            }


def _natural(text: str) -> list[object]:
    """Sort key comparing digit runs as numbers: 'x://9' < 'x://10' (older ids sort first)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _key(m: Machine) -> str:
    """A machine told apart by the cloud's own handle where there is one: an id can change while a
    machine boots (SPC reports a node by name until its provider id exists), a handle (pk) cannot."""
    return m.handle or m.id


def known_machines(state: MachineGroupState) -> set[str]:
    """The ids and handles of every machine of the group this process knows of: listed (and not
    left unadopted), made by a create of ours, deleted meanwhile, or (before the first listing after
    a restart) named by the journal. A machine outside this set that appears in a listing is a
    newcomer."""
    seen = [m for m in state.machines.values() if m.id not in state.unadopted]
    known = {_key(m) for m in seen} | {m.id for m in seen}
    known |= set(state.resolved.values()) | set(state.tombstones)
    if state.baseline is not None:
        known |= state.baseline
    return known
