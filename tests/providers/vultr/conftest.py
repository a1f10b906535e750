"""Fixtures for the Vultr backend: the in-tree cloud-config, a real emulator on a manual clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool
from cloudprovider_grpc.providers.registry import ProviderContext
from cloudprovider_grpc.providers.vultr import VultrDriver, make_client
from cloudprovider_grpc.providers.vultr.config import load_config
from tests.support.servers import BackendClock, ManualClock

FIXTURES = Path(__file__).parent / "fixtures"
#: the in-tree deployment's Secret key `cloud-config`, as a file (examples/cluster-autoscaler-secret.yaml)
CLOUD_CONFIG = FIXTURES / "intree-cloud-config.json"
CLUSTER = "6b8d5f4e-0a39-4b3c-9c1e-1f2a3b4c5d6e"
TOKEN = "VULTRTESTKEY0123456789ABCDEFGHIJKLMNO"
PROVISION_SECONDS = 60.0

#: general 1..20 with 2 nodes, gpu 1..3 with 1 node, fixed "system" (auto_scaler off)
POOLS = (
    EmulatorPool(label="general", plan="vc2-4c-8gb", node_quantity=2, min_nodes=1, max_nodes=20),
    EmulatorPool(
        label="gpu",
        plan="vcg-a16-6c-64g-16vram",
        node_quantity=1,
        min_nodes=0,
        max_nodes=3,
        labels={"accelerator": "a16"},
        taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    ),
    EmulatorPool(
        label="system", plan="vc2-2c-4gb", node_quantity=2, min_nodes=2, max_nodes=2, auto_scaler=False
    ),
)


#: the emulator's API key as a request header
H = {"Authorization": f"Bearer {TOKEN}"}


def pools_url(emu: VultrEmulator, cluster: str = CLUSTER) -> str:
    return f"{emu.base_url}kubernetes/clusters/{cluster}/node-pools"


def patch(emu: VultrEmulator, pool_id: str, body: dict) -> requests.Response:
    """PATCH a node pool, as the API (and the cloud's console) changes it."""
    return requests.patch(f"{pools_url(emu)}/{pool_id}", json=body, headers=H, timeout=5)


def vultr_ctx(emulator: VultrEmulator | None = None, **overrides: Any) -> ProviderContext:
    """The in-tree deployment (--cloud-config=/config/cloud-config) pointed at `emulator`."""
    options: dict[str, Any] = {"rate_limit": 1000, "read_timeout": 2.0, "retry_budget": 20.0, "page_size": 2}
    if emulator is not None:
        options["api_url"] = f"http://{emulator.address}/"
    options.update(overrides.pop("options", {}))
    ctx = ProviderContext(cloud_config=CLOUD_CONFIG, options=options)
    return dataclasses.replace(ctx, **overrides)


def new_emulator(clock: ManualClock | BackendClock | None = None, **kw: Any) -> VultrEmulator:
    kw.setdefault("provision_seconds", PROVISION_SECONDS)
    kw.setdefault("page_size", 2)  # small on purpose: every listing follows cursors
    emu = VultrEmulator(tokens=[TOKEN], clock=clock, **kw)
    emu.add_cluster(CLUSTER, POOLS)
    return emu


@pytest.fixture
def emu_clock() -> ManualClock:
    return ManualClock(start=1_760_000_000.0)


@pytest.fixture
def emulator(emu_clock: ManualClock) -> Iterator[VultrEmulator]:
    with new_emulator(emu_clock) as emu:
        yield emu  # type: ignore[misc]


def make_driver(emulator: VultrEmulator, **overrides: Any) -> VultrDriver:
    config = load_config(vultr_ctx(emulator, **overrides))
    return VultrDriver(config, make_client(config))
