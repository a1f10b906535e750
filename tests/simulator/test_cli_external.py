"""`cloudprovider-grpc simulate` end to end, and the simulator against an already running server."""

import json
from pathlib import Path

import pytest

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import start_server
from cloudprovider_grpc.simulator import parse_scenario, run

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_cli_writes_report_and_prints_the_decision_log(tmp_path, capsys):
    rc = main(["simulate", str(EXAMPLES / "gpu-pool.yaml"), "--out", str(tmp_path), "--seed", "3"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "Best option to resize: gpu" in out
    assert "Scale-down: removing empty node gpu-0" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["seed"] == 3 and report["scenario"] == "gpu-pool"
    assert [d["group"] for d in report["decisions"] if d["kind"] == "scale-up"] == ["gpu"]
    assert "gpu-pool: 271 loops, 2 node(s) added, 2 removed" in out


def test_cli_rejects_a_bad_scenario(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration: 1h\nautoscaler: {expander: cheapest}\n")
    assert main(["simulate", str(bad), "--out", str(tmp_path)]) == 2
    assert "autoscaler.expander" in capsys.readouterr().err


def test_cli_reports_an_unreachable_server(tmp_path, capsys):
    assert (
        main(["simulate", str(EXAMPLES / "burst.yaml"), "--server", "127.0.0.1:9", "--out", str(tmp_path)])
        == 1
    )
    assert "no gRPC server reachable at 127.0.0.1:9" in capsys.readouterr().err


def test_against_a_running_server():
    """--server mode: the server runs on its own (real clock, background workers); loops are paced
    to wall time, so its machines (provisioning_delay 0) boot and register between loops."""
    cloud = {
        "provisioning_delay": 0,
        "deletion_delay": 0,
        "groups": [{"id": "pool", "min_size": 0, "max_size": 4, "capacity": {"cpu": "2", "memory": "8Gi"}}],
    }
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""),
        provider=build_provider("sim", ProviderContext(options=cloud)),
    )
    try:
        s = parse_scenario(
            {
                "name": "ext",
                "duration": "2s",
                "autoscaler": {"scan-interval": "1s"},
                "workloads": [{"name": "w", "replicas": 5, "requests": {"cpu": "1", "memory": "1Gi"}}],
            }
        )
        r = run(s, server=handle.address)
    finally:
        handle.stop(grace=1.0)
    ups = r.of_kind("scale-up")
    # 5 pods x 1 cpu on 2-cpu nodes -> ceil(5/2) = 3, decided in the first loop
    assert (ups[0].t, ups[0].group, ups[0].delta) == (0.0, "pool", 3)
    assert r.provider == f"external {handle.address}"
    assert r.rpc_counts["autoscaler"]["NodeGroupIncreaseSize"] == 1
    assert r.timeline["nodes"]["pool"][-1] == 3 and r.timeline["pending"][-1] == 0


def test_cherry_backend_against_its_emulator():
    """The same decisions through the Cherry backend talking HTTP to its bundled API emulator."""
    s = parse_scenario(
        {
            "name": "cherry",
            "duration": "2m",
            "provider": "cherry",
            "cloud": {
                "cluster-name": "sim",
                "rate-limit": 1000,
                "global": {
                    "project-id": 42,
                    "plan": "cloud_vps_1",
                    "region": "eu_nord_1",
                    "os": "ubuntu_24_04",
                },
                "pools": {"workers": {"min-size": 0, "max-size": 4}},
                "emulator": {"deploy-seconds": 0, "stock": 10},
            },
            "workloads": [{"name": "web", "replicas": 6, "requests": {"cpu": "500m", "memory": "512Mi"}}],
        }
    )
    r = run(s, emulate=True)
    ups = r.of_kind("scale-up")
    # cloud_vps_1 is 1 cpu / 1Gi: 2 pods of 500m / 512Mi per node -> ceil(6/2) = 3 nodes
    assert [(d.t, d.group, d.delta) for d in ups] == [(0.0, "workers", 3)]
    assert r.timeline["nodes"]["workers"][-1] == 3 and r.timeline["pending"][-1] == 0
    assert r.rpc_counts["autoscaler"]["NodeGroupTemplateNodeInfo"] >= 1


def test_increase_size_error_backs_the_group_off():
    """An IncreaseSize RPC error (here: the cloud API is down for one group) is a failed scale-up."""
    from cloudprovider_grpc.core.errors import Unavailable
    from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
    from cloudprovider_grpc.providers.sim import SimCloud, SimDriver, parse_options

    class FlakyGroup(MachineProvider):
        def increase_size(self, group_id: str, delta: int) -> None:
            if group_id == "flaky":
                raise Unavailable("cloud API unavailable")
            super().increase_size(group_id, delta)

    cloud = {
        "provisioning_delay": 0,
        "groups": [
            {"id": "flaky", "min_size": 0, "max_size": 4, "capacity": {"cpu": "2", "memory": "8Gi"}},
            {"id": "steady", "min_size": 0, "max_size": 4, "capacity": {"cpu": "2", "memory": "8Gi"}},
        ],
    }
    ctx = ProviderContext(options=cloud)
    provider = FlakyGroup(SimDriver(SimCloud(parse_options(ctx))))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    try:
        s = parse_scenario(
            {
                "name": "flaky",
                "duration": "1s",
                "autoscaler": {"scan-interval": "1s", "expander": "priority"},
                "priorities": {20: ["flaky"], 10: ["steady"]},
                "workloads": [{"name": "w", "replicas": 3, "requests": {"cpu": "1", "memory": "1Gi"}}],
            }
        )
        r = run(s, server=handle.address)
    finally:
        handle.stop(grace=1.0)
    errors = r.of_kind("scale-up-error")
    # loop 0: priority picks flaky, IncreaseSize fails -> backoff 5m (OtherError with the status)
    assert [(d.t, d.group, d.delta) for d in errors] == [(0.0, "flaky", 2)]
    assert errors[0].reason == "cloud API unavailable"
    assert errors[0].inputs["backoff_until"] == 300.0
    # loop 1: flaky is backed off, steady takes the 3 pods (2 per 2-cpu node -> 2 nodes)
    ups = r.of_kind("scale-up")
    assert (ups[0].t, ups[0].group, ups[0].delta) == (1.0, "steady", 2)
    assert ups[0].inputs["skipped_groups"]["flaky"].startswith("backed off (OtherError.UNAVAILABLE")


@pytest.mark.parametrize(("provider", "hinted"), [("vultr", True), ("aws", False)])
def test_the_emulate_hint_is_given_only_where_an_emulator_exists(
    provider: str, hinted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A backend that cannot start without a cloud account is told about its bundled emulator; a
    name no backend has is told the known ones, not to add --emulate."""
    scenario = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "burst.yaml"
    assert main(["simulate", str(scenario), "--provider", provider, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert ("add --emulate" in err) is hinted, err
    if not hinted:
        assert "unknown provider 'aws' (known: " in err, err
