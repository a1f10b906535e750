"""`simulate --compare`: the same scenario under several CA settings, each variant's report.json
byte-identical to a single run of that variant, on local worker processes and on Dask."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloudprovider_grpc.cli import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BURST = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "burst.yaml"
VARIANTS = {"quick": "2m", "patient": "20m"}


@pytest.fixture(scope="module")
def single_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = {}
    for name, unneeded in VARIANTS.items():
        d = tmp_path_factory.mktemp(name)
        args = ["simulate", str(BURST), "--quiet", "--seed", "4", "--out", str(d)]
        assert main([*args, "--set", f"autoscaler.scale-down-unneeded-time={unneeded}"]) == 0
        out[name] = (d / "report.json").read_bytes()
    assert out["quick"] != out["patient"]
    return out


def _compare(tmp_path: Path, executor: str, capsys: pytest.CaptureFixture[str], files: bool = False) -> str:
    """Variants as files merged over the scenario (`--compare`), or as `--variant` edits."""
    args = ["simulate", str(BURST), "--seed", "4", "--out", str(tmp_path / "out"), "--executor", executor]
    for name, unneeded in VARIANTS.items():
        if files:
            f = tmp_path / f"{name}.yaml"
            f.write_text(f"autoscaler:\n  scale-down-unneeded-time: {unneeded}\n")
            args += ["--compare", str(f)]
        else:
            args += ["--variant", f"{name}:autoscaler.scale-down-unneeded-time={unneeded}"]
    assert main(args) == 0
    return capsys.readouterr().out


def _table(out: str) -> dict[str, list[str]]:
    lines = [line.split() for line in out.splitlines() if line.split()[:1] in (["quick"], ["patient"])]
    return {cells[0]: cells[1:] for cells in lines}


def test_local_processes_give_the_single_runs_reports(tmp_path, capsys, single_runs) -> None:
    out = _compare(tmp_path, "local:2", capsys, files=True)
    for name, report in single_runs.items():
        assert (tmp_path / "out" / name / "report.json").read_bytes() == report
        assert (tmp_path / "out" / name / "report.html").is_file()
    assert re.search(r"^variant +node-hours", out, re.M)
    # the unmodified input runs first, as the baseline, and the combined pages are written
    assert re.search(r"^baseline +\d", out, re.M)
    assert (tmp_path / "out" / "baseline" / "report.json").is_file()
    assert (tmp_path / "out" / "compare.html").is_file() and (tmp_path / "out" / "compare.csv").is_file()
    table = _table(out)
    # waiting 20 minutes before removing an empty node keeps nodes longer: more node-hours
    assert float(table["patient"][0]) > float(table["quick"][0])


def test_a_dask_cluster_gives_the_single_runs_reports(tmp_path, capsys, single_runs) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
    ) as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        out = _compare(tmp_path, f"dask://{address}", capsys)
    for name, report in single_runs.items():
        assert (tmp_path / "out" / name / "report.json").read_bytes() == report
    assert set(_table(out)) == set(VARIANTS)
