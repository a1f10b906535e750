"""Fixtures for the Exoscale backend: a real emulator on loopback, its OpenAPI recorder, a driver."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator
from cloudprovider_grpc.providers.exoscale import ExoscaleDriver, make_client
from cloudprovider_grpc.providers.exoscale.config import load_config
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from tests.providers.exoscale.openapi import Recorder
from tests.support.servers import ManualClock

KEY = "EXO1a2b3c4d5e6f7a8b9c0d1e2f"
SECRET = "s3cr3t-Value_with.signs+/="
ZONE = "de-fra-1"
ENV = {"EXOSCALE_ZONE": ZONE, "EXOSCALE_API_KEY": KEY, "EXOSCALE_API_SECRET": SECRET}


def ctx_for(emulator: ExoscaleEmulator | None = None, **overrides: Any) -> ProviderContext:
    """The in-tree deployment's inputs (three env vars, --nodes) plus our endpoint override."""
    env = dict(ENV)
    if emulator is not None:
        env["EXOSCALE_API_ENDPOINT"] = emulator.base_url
    env.update(overrides.pop("env", {}))
    options: dict[str, Any] = {"rate-limit": 1000, "read-timeout": 2.0, "retries": 2}
    options.update(overrides.pop("options", {}))
    ctx = ProviderContext(env=env, options=options)
    return dataclasses.replace(ctx, **overrides)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_760_000_000.0)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def emulator(clock: ManualClock, recorder: Recorder) -> Iterator[ExoscaleEmulator]:
    """An emulated zone: SKS cluster `prod` (nodepools `workers` size 2, `gpu` size 0), another
    cluster `staging`, and a standalone pool `batch` (size 1); every answer checked against the
    OpenAPI document."""
    emu = ExoscaleEmulator(zone=ZONE, keys={KEY: SECRET}, boot_seconds=30, destroy_seconds=10, clock=clock)
    cid = emu.add_cluster("prod")
    emu.add_nodepool(cid, "workers", instance_type="standard.large", size=2, labels={"tier": "app"})
    emu.add_nodepool(
        cid,
        "gpu",
        instance_type="gpua5000.small",
        taints={"nvidia.com/gpu": {"value": "present", "effect": "NoSchedule"}},
    )
    other = emu.add_cluster("staging")
    emu.add_nodepool(other, "workers", size=1)
    emu.add_pool("batch", instance_type="standard.small", size=1)
    emu.observer = recorder
    with emu:
        yield emu
    assert not recorder.problems, recorder.problems


def make_driver(emulator: ExoscaleEmulator, **overrides: Any) -> ExoscaleDriver:
    overrides.setdefault("env", {"EXOSCALE_SKS_CLUSTER": "prod"})
    config = load_config(ctx_for(emulator, **overrides))
    return ExoscaleDriver(config, make_client(config))


def spec(text: str) -> NodesSpec:
    return NodesSpec.parse(text)
