"""The per-group gauges follow the cloud's groups: a renamed pool carries one info series, a pool
that stops being autoscaled and a stopped provider leave none behind (a stale `node_group_info`
series would make the documented `group_left (name)` join match twice)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.providers.registry import build_provider
from tests.providers.vultr.conftest import patch, vultr_ctx

pytestmark = pytest.mark.integration


def series(metric: str, group: str) -> list[dict[str, str]]:
    return [
        s.labels
        for m in REGISTRY.collect()
        if m.name == metric
        for s in m.samples
        if s.labels.get("backend") == "vultr" and s.labels.get("group") == group
    ]


def test_group_series_follow_renames_and_removals_and_go_with_the_provider(emulator: VultrEmulator) -> None:
    provider = build_provider("vultr", vultr_ctx(emulator, inline_workers=True))
    general, gpu = emulator.pool_id("general"), emulator.pool_id("gpu")
    try:
        provider.refresh()
        assert [s["name"] for s in series("cloudprovider_grpc_node_group_info", general)] == ["general"]

        with emulator.lock:  # renamed in the cloud's console: the API cannot change a pool's label
            emulator.pools[general]["label"] = "workers"
        provider.refresh()
        assert [s["name"] for s in series("cloudprovider_grpc_node_group_info", general)] == ["workers"]

        assert patch(emulator, gpu, {"auto_scaler": False}).status_code == 202
        provider.refresh()
        for metric in ("node_group_info", "node_group_target_size", "node_group_machines"):
            assert series(f"cloudprovider_grpc_{metric}", gpu) == [], metric
        assert series("cloudprovider_grpc_node_group_target_size", general) != []
    finally:
        provider.stop(timeout=0)
    for metric in ("node_group_info", "node_group_target_size", "node_group_machines"):
        assert series(f"cloudprovider_grpc_{metric}", general) == [], metric
