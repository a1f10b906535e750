"""Fixtures for the Cherry backend: the in-tree example cloud-config, env vars, a real emulator."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.providers.cherry import make_client
from cloudprovider_grpc.providers.cherry.config import load_config
from cloudprovider_grpc.providers.cherry.driver import CherryDriver
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext
from tests.support.servers import ManualClock

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = FIXTURES / "intree-example.ini"
TOKEN = "cherry-test-token-4f2b"
PROJECT = 123456
ENV = {
    "CHERRY_AUTH_TOKEN": TOKEN,
    "BOOTSTRAP_TOKEN_ID": "abcdef",
    "BOOTSTRAP_TOKEN_SECRET": "0123456789abcdef",
}


def example_ctx(emulator: CherryEmulator | None = None, **overrides: Any) -> ProviderContext:
    """The in-tree example deployment: --cluster-name=cluster1 --nodes=0:10:pool1 (+ pool2)."""
    options: dict[str, Any] = {"rate-limit": 1000, "read-timeout": 2.0, "retries": 4}
    if emulator is not None:
        options["api-url"] = emulator.base_url
    options.update(overrides.pop("options", {}))
    ctx = ProviderContext(
        nodes=(NodesSpec(0, 10, "pool1"), NodesSpec(0, 5, "pool2")),
        cloud_config=EXAMPLE,
        cluster_name="cluster1",
        env=dict(ENV),
        options=options,
    )
    return dataclasses.replace(ctx, **overrides)


@pytest.fixture
def emu_clock() -> ManualClock:
    return ManualClock(start=1_760_000_000.0)


@pytest.fixture
def emulator(emu_clock: ManualClock) -> Iterator[CherryEmulator]:
    emu = CherryEmulator(
        tokens={TOKEN: 100}, projects={PROJECT: 100, 777: 200}, deploy_seconds=60, clock=emu_clock
    )
    with emu:
        yield emu


def make_driver(emulator: CherryEmulator, **overrides: Any) -> CherryDriver:
    config = load_config(example_ctx(emulator, **overrides))
    return CherryDriver(config, make_client(config))
