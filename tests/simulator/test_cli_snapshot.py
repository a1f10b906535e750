"""`simulate --from-dump` end to end: the written scenario runs to the same report as the
snapshot it came from, and every bad start fails with one line and the right exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cloudprovider_grpc.cli import main

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DUMP = EXAMPLES / "snapshot" / "cluster.json"


@pytest.mark.slow
def test_the_written_scenario_reruns_to_the_same_report(tmp_path, capsys) -> None:
    common = ["--provider", "vultr", "--emulate", "--duration", "20m", "--quiet"]
    cloud = ["--cloud", str(EXAMPLES / "snapshot" / "vultr-emulator.yaml")]
    written = tmp_path / "scenario.yaml"
    edits = ["--scale", "web=2x", "--write-scenario", str(written)]
    assert (
        main(["simulate", "--from-dump", str(DUMP), *common, *cloud, *edits, "--out", str(tmp_path / "a")])
        == 0
    )
    out = capsys.readouterr().out
    assert "note: CA flags with no effect on the simulated decisions, ignored: --cloud-config" in out
    assert written.read_text().startswith("# Written by `cloudprovider-grpc simulate`.\n# CA flags")
    assert main(["simulate", str(written), *common, "--out", str(tmp_path / "b")]) == 0
    a = (tmp_path / "a" / "report.json").read_text()
    b = (tmp_path / "b" / "report.json").read_text()
    # the snapshot's run carries its notes; otherwise the two runs are the same run
    assert '"notes"' in a and '"scale-up"' in b
    assert _without_notes(a) == _without_notes(b)


def _without_notes(text: str) -> str:
    import json

    data = json.loads(text)
    data.pop("notes", None)
    return json.dumps(data, sort_keys=True)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--from-dump", str(DUMP)],
            2,
            "a cluster snapshot needs its node groups: give --server or --provider",
        ),
        (
            [str(EXAMPLES / "scenarios" / "burst.yaml"), "--from-dump", str(DUMP)],
            2,
            "give one of SCENARIO.yaml",
        ),
        (["--from-dump", "nope.json", "--provider", "sim"], 2, "nope.json: cannot read"),
        (["--from-dump", str(DUMP), "--server", "127.0.0.1:9"], 1, "RPC to 127.0.0.1:9 failed"),
        (
            ["--from-cluster", "--kubeconfig", "/nonexistent", "--provider", "sim"],
            2,
            "cannot load the kubeconfig",
        ),
        ([str(EXAMPLES / "scenarios" / "burst.yaml"), "--scale", "foo=2x"], 2, "no such workload"),
    ],
)
def test_bad_starts_fail_with_one_line(tmp_path, capsys, args, code, message) -> None:
    assert main(["simulate", *args, "--out", str(tmp_path), "--quiet"]) == code
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_running_servers_groups_become_a_sim_twin(tmp_path, capsys) -> None:
    """With --server the groups, templates, prices and sizes are read once over gRPC and copied
    into a `sim` twin: the what-if runs in-process, and the live server is never asked to scale."""
    from cloudprovider_grpc.config.settings import Settings
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
    from cloudprovider_grpc.server.assembly import start_server
    from tests.simulator import dumps

    cloud = {
        "groups": [
            {"id": "pool-a", "min_size": 1, "max_size": 6, "initial_size": 2, "price_per_hour": 0.25,
             "capacity": {"cpu": "4", "memory": "8Gi"}, "labels": {"tier": "a"}},
        ]
    }  # fmt: skip
    provider = build_provider("sim", ProviderContext(options=cloud))
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=provider)
    try:
        nodes = [
            dumps.node(f"pool-a-{i}", f"sim://pool-a/{i}", {"cpu": "4", "memory": "8Gi"}, {"tier": "a"})
            for i in range(2)
        ]
        dump = tmp_path / "dump.json"
        pods = dumps.deployment_pods("web", 4, {"cpu": "1", "memory": "1Gi"}, ["pool-a-0", "pool-a-1"])
        dump.write_text(json.dumps(dumps.as_list([*nodes, *pods])))
        twin = tmp_path / "twin.yaml"
        args = ["simulate", "--from-dump", str(dump), "--server", handle.address, "--duration", "10m"]
        assert (
            main(
                [*args, "--scale", "web=3x", "--write-scenario", str(twin), "--out", str(tmp_path), "--quiet"]
            )
            == 0
        )
        increases = provider.target_size("pool-a")
    finally:
        handle.stop(grace=1.0)
    assert increases == 2  # the live server's group was never resized
    data = yaml.safe_load(twin.read_text())
    assert data["provider"] == "sim"
    (group,) = data["cloud"]["groups"]
    assert (group["id"], group["min_size"], group["max_size"], group["initial_size"]) == ("pool-a", 1, 6, 2)
    assert group["price_per_hour"] == 0.25 and group["labels"] == {"tier": "a"}
    report = json.loads((tmp_path / "report.json").read_text())
    assert [d["group"] for d in report["decisions"] if d["kind"] == "scale-up"] == ["pool-a"]
