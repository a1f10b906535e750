"""The configuration's `group_options` reach cluster-autoscaler on every real backend: each cloud's
server runs against its bundled API emulator on a real gRPC port, through the compiled front and
with Python serving the port alone, and is asked NodeGroupGetOptions as each CA generation asks it.

A group is named in `group_options` by its id (Cherry, AliCloud, SPC) or by the cloud's name for it
(a Vultr or Exoscale pool's label, whose id is a UUID), as `--nodes` names one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.grpcapi.wire import options_to_pb
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.server.assembly import ServerHandle, start_server
from tests.grpcapi.test_generations import (
    CA,
    _tag,
    _varint,
    defaults_of,
    options_body,
    raw_call,
    request,
    startup,
)
from tests.support.backends import BackendUnderTest, backend
from tests.support.servers import channel

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Case:
    """A backend with its two end-to-end groups: `tuned` gets options, by the reference `ref`."""

    backend: BackendUnderTest
    ref: str

    @property
    def tuned(self) -> str:
        return self.backend.e2e_group

    @property
    def plain(self) -> str:
        return self.backend.stockout_group


CASES = (
    Case(backend("cherry"), "workers"),
    Case(backend("alicloud"), "asg-bp1e2etstworkers00001"),
    Case(backend("vultr"), "workers"),  # the pool's label
    Case(backend("spc"), "autoscaling-spc755avwe-pool-1"),
    Case(backend("exoscale"), "workers"),  # the nodepool's name
)

#: 20 minutes to turn Ready (bare metal installing its drivers), written as a Go duration
STARTUP = 1200.0


@pytest.fixture(params=CASES, ids=[c.backend.name for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=["auto", "off"])
def front(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextmanager
def served(
    case: Case, front: str, compiled_front: Path | None
) -> Iterator[tuple[ServerHandle, grpc.Channel]]:
    """`serve` for the backend against its emulator, with `group_options` for the tuned group, after
    CA's first Refresh."""
    if front == "auto" and compiled_front is None:
        pytest.skip("the compiled front could not be built here (no Go toolchain); CI requires it")
    config: dict[str, Any] = yaml.safe_load(case.backend.e2e_config)
    config["group_options"] = {case.ref: {"max_node_startup_time": "20m", "scale_down_unneeded_time": 300}}
    settings = Settings(
        provider=case.backend.provider,
        emulate=True,
        address="127.0.0.1:0",
        metrics_address="",
        front=front,
        **config,
    )
    handle = start_server(settings)
    try:
        assert (handle.front is not None) == (front == "auto")
        with channel(handle) as ch:
            raw_call(ch, "Refresh")(b"")
            yield handle, ch
    finally:
        handle.stop(grace=1)


def test_a_groups_startup_time_reaches_ca_1_37_in_field_11(
    case: Case, front: str, compiled_front: Path | None, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1.37-shaped request (field 11 a Duration) for the configured group gets the group's own
    startup time in field 11, its other option too; field 11 as a varint is echoed unchanged; the
    other group gets no options; CA 1.35-1.36 get none for either (they would read 0 from an answer)."""
    caplog.set_level(logging.WARNING)
    with served(case, front, compiled_front) as (_, ch):
        options = raw_call(ch, "NodeGroupGetOptions")
        ours = CA.merged({"scale_down_unneeded_time": 300.0})
        known = options_to_pb(ours).SerializeToString()
        for _ in range(2):  # the second answer may come from the front's cache: the same bytes
            got = options_body(options(request(case.tuned, defaults_of("1.37+"))))
            assert got == known + startup(STARTUP)
            varint = _tag(11, 0) + _varint(1)
            got = options_body(options(request(case.tuned, defaults_of("1.35-1.36") + varint)))
            assert got == known + varint  # another numbering upstream: never read as a time
            assert options(request(case.plain, defaults_of("1.37+"))) == b""  # no options
            assert options(request(case.tuned, defaults_of("1.35-1.36"))) == b""
            # CA 1.33-1.34.1 have no field 11 to carry it: the group's other option alone
            later = options_body(options(request(case.tuned, defaults_of("1.33-1.34.1"))))
            assert later is not None
            assert pb.NodeGroupAutoscalingOptions.FromString(later).scaleDownUnneededDuration.seconds == 300
    assert not [r for r in caplog.records if "group_options names" in r.getMessage()]


def test_a_configured_group_the_cloud_does_not_offer_is_warned_about_once(
    compiled_front: Path | None, caplog: pytest.LogCaptureFixture
) -> None:
    """`serve` runs (a group may be discovered later) and says once which names match no group."""
    caplog.set_level(logging.WARNING, logger="cloudprovider_grpc.providers.machinery")
    case = Case(backend("vultr"), "wrokers")
    with served(case, "off", compiled_front) as (_, ch):
        refresh = raw_call(ch, "Refresh")
        refresh(b"")
        options = raw_call(ch, "NodeGroupGetOptions")
        assert options(request(case.tuned, defaults_of("1.37+"))) == b""
    warned = [r.getMessage() for r in caplog.records if "group_options names" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "'wrokers'" in warned[0] and "apply to none" in warned[0]


def test_the_sim_clouds_own_options_yield_to_the_configured_ones(compiled_front: Path | None) -> None:
    """The same section serves the sim cloud: a key given there wins over the group's own `options:`,
    the group's other own keys stay."""
    settings = Settings(
        provider="sim",
        address="127.0.0.1:0",
        metrics_address="",
        front="off",
        backends={
            "sim": {
                "groups": [
                    {
                        "id": "gpu",
                        "max_size": 3,
                        "options": {"max_node_startup_time": 600.0, "scale_down_unneeded_time": 120.0},
                    }
                ]
            }
        },
        group_options={"gpu": {"max_node_startup_time": "30m"}},
    )
    handle = start_server(settings)
    try:
        with channel(handle) as ch:
            options = raw_call(ch, "NodeGroupGetOptions")
            known = options_to_pb(CA.merged({"scale_down_unneeded_time": 120.0})).SerializeToString()
            assert options_body(options(request("gpu", defaults_of("1.37+")))) == known + startup(1800)
    finally:
        handle.stop(grace=1)
