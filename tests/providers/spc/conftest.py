"""Fixtures for the SPC backend: the fork's environment, a real emulator on a manual clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.providers.registry import ProviderContext
from cloudprovider_grpc.providers.spc import make_client
from cloudprovider_grpc.providers.spc.config import load_config
from cloudprovider_grpc.providers.spc.driver import SpcDriver
from tests.support.servers import ManualClock

TOKEN = "d0bf933f1a9f2c04f99e4bc713289fbb35abb3a5"
ORG = 4
CLUSTER = 12
#: the emulated cluster's timings (seconds per state), stepped with the manual clock
DRAFT, BUILDING, PROVISIONED, DELETING = 60.0, 120.0, 60.0, 30.0


def env_for(emulator: SpcEmulator | None) -> dict[str, str]:
    """The four variables the fork's Deployment fills from the `stackpointio` Secret."""
    return {
        "CLUSTER_API_TOKEN": TOKEN,
        "SPC_API_BASE_URL": emulator.base_url if emulator else "https://api.stackpoint.io",
        "ORGANIZATION_ID": str(ORG),
        "CLUSTER_ID": str(CLUSTER),
    }


def spc_ctx(emulator: SpcEmulator | None = None, **overrides: Any) -> ProviderContext:
    options: dict[str, Any] = {"rate-limit": 1000, "read-timeout": 2.0}
    options.update(overrides.pop("options", {}))
    ctx = ProviderContext(env=env_for(emulator), options=options)
    return dataclasses.replace(ctx, **overrides)


@pytest.fixture
def emu_clock() -> ManualClock:
    return ManualClock(start=1_760_000_000.0)


@pytest.fixture
def emulator(emu_clock: ManualClock) -> Iterator[SpcEmulator]:
    """Org 4 / cluster 12 (the API docs' example ids) with the demo pools, on the manual clock."""
    emu = SpcEmulator(
        tokens={TOKEN: {ORG}},
        draft_seconds=DRAFT,
        building_seconds=BUILDING,
        provisioned_seconds=PROVISIONED,
        deleting_seconds=DELETING,
        clock=emu_clock,
    )
    emu.seed_demo(ORG, CLUSTER)
    emu.add_org(99)  # someone else's organization
    emu.add_cluster(99, 13)
    with emu:
        yield emu


def pools(emu: SpcEmulator) -> dict[str, dict[str, Any]]:
    """Group id -> pool record of the emulated cluster."""
    return {f"autoscaling-{p['instance_id']}": p for p in emu.pools.values() if p["cluster"] == CLUSTER}


def make_driver(emulator: SpcEmulator, clock: ManualClock | None = None, **overrides: Any) -> SpcDriver:
    config = load_config(spc_ctx(emulator, **overrides))
    return SpcDriver(config, make_client(config), clock=clock)
