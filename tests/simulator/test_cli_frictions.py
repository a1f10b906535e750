"""The simulate command's small promises, over its real command line: `--no-pace` reaches the
loop, `--out` is checked before a run that may take minutes, and a `--drain-group` naming no
node group is an error that names the groups there are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import start_server

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_no_pace_runs_the_loops_of_a_server_run_back_to_back(tmp_path: Path, capsys) -> None:
    """Paced, this half hour would take half an hour of wall time (the test's limit ends it)."""
    cloud = {
        "groups": [{"id": "pool", "min_size": 0, "max_size": 4, "capacity": {"cpu": "2", "memory": "8Gi"}}]
    }
    handle = start_server(
        Settings(address="127.0.0.1:0", metrics_address=""),
        provider=build_provider("sim", ProviderContext(options=cloud)),
    )
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "name": "unpaced",
                "duration": "30m",
                "autoscaler": {"scan-interval": "10s"},
                "workloads": [{"name": "w", "replicas": 3, "requests": {"cpu": "1", "memory": "1Gi"}}],
            }
        )
    )
    try:
        args = ["simulate", str(scenario), "--server", handle.address, "--no-pace", "--quiet"]
        assert main([*args, "--out", str(tmp_path / "out")]) == 0
    finally:
        handle.stop(grace=1.0)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["summary"]["loops"] == 181
    assert any("loops ran back to back" in n for n in report["notes"])
    assert "unpaced: 181 loops" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("where", "says"),
    [("file", "exists and is not a directory"), ("file/sub", "cannot write there")],
)
def test_an_unusable_out_is_one_line_before_anything_runs(
    tmp_path: Path, capsys, where: str, says: str
) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    out = tmp_path / where
    assert main(["simulate", str(EXAMPLES / "burst.yaml"), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith(f"cloudprovider-grpc simulate: --out {out}: {says}")
    assert captured.out == ""  # no decision log: the simulation never started


def test_an_unknown_drain_group_names_the_groups_there_are(tmp_path: Path, capsys) -> None:
    args = ["simulate", str(EXAMPLES / "burst.yaml"), "--drain-group", "nosuch", "--quiet"]
    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "cloudprovider-grpc simulate: node_events (--drain-group): no node group 'nosuch' "
        "(node groups: general, highmem)"
    ]
    assert not (tmp_path / "report.json").exists()


def test_an_unknown_scale_target_names_the_workloads_there_are(tmp_path: Path, capsys) -> None:
    args = ["simulate", str(EXAMPLES / "burst.yaml"), "--scale", "deployment/nosuch=2x"]
    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    names = sorted(w["name"] for w in yaml.safe_load((EXAMPLES / "burst.yaml").read_text())["workloads"])
    assert err.splitlines() == [
        f"cloudprovider-grpc simulate: --scale 'deployment/nosuch=2x': no such workload "
        f"(workloads: {', '.join(names)})"
    ]
