"""What a new user meets in the first hour without a cloud account: each message says what is
missing and how to give it, all at once, and the fallback a cloud picks silently is named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
CLOUD_VARIABLES = (
    "CHERRY_AUTH_TOKEN", "VULTR_API_KEY", "ACCESS_KEY_ID", "ACCESS_KEY_SECRET", "REGION_ID",
    "ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALICLOUD_OIDC_PROVIDER_ARN", "CLUSTER_API_TOKEN",
)  # fmt: skip


def bare(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command as a new user would: none of the clouds' credential variables set."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CLOUD_VARIABLES and not k.startswith("CLOUDPROVIDER_GRPC_")
    }
    return subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=cwd,
    )  # fmt: skip


def test_cherry_reports_every_missing_input_at_once_naming_cloud_config() -> None:
    out = bare("check-config", "--provider", "cherry")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("cloudprovider-grpc: invalid configuration: 3 problems: "), line
    for named in ("nodes: no node groups", "--cloud-config", "CHERRY_AUTH_TOKEN: is required and missing"):
        assert named in line, named


def test_vultr_without_a_cloud_config_says_which_flag_is_missing() -> None:
    out = bare("check-config", "--provider", "vultr")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(
        "cloudprovider-grpc: invalid configuration: --cloud-config: no VKE cluster given"
    ), line
    assert "empty cluster ID" not in line


def test_alicloud_says_it_falls_back_to_the_ecs_ram_role() -> None:
    out = bare("check-config", "--offline", "--provider", "alicloud", "--nodes", "0:5:asg-123")
    assert out.returncode == 0, out.stderr
    assert "configuration OK" in out.stdout
    assert "no AccessKey (ACCESS_KEY_ID, ACCESS_KEY_SECRET) or RRSA" in out.stderr
    assert "using the ECS RAM role from the metadata server at http://100.100.100.200/" in out.stderr


@pytest.mark.parametrize(
    "scenario",
    sorted(
        p.name
        for p in (ROOT / "examples" / "scenarios").glob("*.yaml")
        if "provider:" in p.read_text() and "provider: sim" not in p.read_text()
    ),
)
def test_a_cloud_scenario_without_credentials_suggests_emulate(scenario: str, tmp_path: Path) -> None:
    out = bare("simulate", f"examples/scenarios/{scenario}", "--out", str(tmp_path), cwd=ROOT)
    assert out.returncode == 2, out.stdout
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("cloudprovider-grpc simulate: invalid configuration: "), line
    assert line.endswith("API emulator, add --emulate)"), line


def test_every_cloud_has_the_kustomize_overlays_the_docs_promise() -> None:
    """docs/deploying.md: `manifests/providers/<cloud>/` (sidecar) and `<cloud>/standalone/`, for every
    cloud; tests/deploy/ renders each and runs check-config on what the pod would get."""
    from cloudprovider_grpc.providers.registry import BACKENDS

    guide = (ROOT / "docs" / "deploying.md").read_text()
    assert "`manifests/providers/<cloud>/standalone/`" in guide
    missing = [
        f"manifests/providers/{cloud}/{layout}"
        for cloud in BACKENDS
        if cloud != "sim"
        for layout in ("", "standalone/")
        if not (ROOT / "manifests" / "providers" / cloud / layout / "kustomization.yaml").is_file()
    ]
    assert not missing, missing


@pytest.mark.parametrize("cloud", ["sim", "cherry", "vultr", "exoscale", "alicloud", "spc"])
def test_gpu_label_and_gpu_types_agree(cloud: str) -> None:
    """CA finds a node's GPU type under GPULabel and checks it against GetAvailableGPUTypes: types
    without a label are a promise no node can keep (a label without types is a cloud with no GPU
    group now). Every GPU template carries the label with one of the types."""
    from cloudprovider_grpc.core.errors import NotImplementedByProvider
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider

    provider = build_provider(cloud, ProviderContext(emulate=True, inline_workers=True))
    try:
        provider.refresh()
        label, types = provider.gpu_label(), provider.gpu_types()
        assert label or not types, (label, types)
        for group in provider.node_groups():
            try:
                template = provider.template(group.id)
            except NotImplementedByProvider:
                continue
            if "nvidia.com/gpu" in template.capacity and label:
                assert template.labels.get(label) in types, (group.id, template.labels, types)
    finally:
        provider.stop(timeout=0)


@pytest.mark.parametrize("cloud", ["sim", "cherry", "vultr", "exoscale", "alicloud", "spc"])
def test_every_demo_group_starts_within_its_bounds(cloud: str) -> None:
    """`--emulate` alone: no demo group shows a target below its min size (or above its max)."""
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider

    provider = build_provider(cloud, ProviderContext(emulate=True, inline_workers=True))
    try:
        provider.refresh()
        for g in provider.node_groups():
            assert g.min_size <= provider.target_size(g.id) <= g.max_size, (g.id, g.debug)
    finally:
        provider.stop(timeout=0)


@pytest.mark.parametrize("cloud", ["vultr", "exoscale"])
def test_groups_named_by_uuid_show_their_name_in_logs_and_metrics(
    cloud: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from prometheus_client import REGISTRY

    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider

    provider = build_provider(cloud, ProviderContext(emulate=True, inline_workers=True))
    try:
        provider.refresh()
        group = next(g for g in provider.node_groups() if g.max_size > provider.target_size(g.id))
        assert len(group.id) == 36, group.id  # a UUID, as the cloud names it
        with caplog.at_level(logging.INFO, logger="cloudprovider_grpc"):
            provider.increase_size(group.id, 1)
        line = next(r.getMessage() for r in caplog.records if "target" in r.getMessage())
        samples = [
            s
            for metric in REGISTRY.collect()
            if metric.name == "cloudprovider_grpc_node_group_info"
            for s in metric.samples
            if s.labels["group"] == group.id
        ]
        assert len(samples) == 1 and samples[0].value == 1
        name = samples[0].labels["name"]
        assert name and name != group.id
        assert line.startswith(f"node group {group.id} ({name}): target "), line
    finally:
        provider.stop(timeout=0)
