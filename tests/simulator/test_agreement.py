"""The simulation read against the real cluster-autoscaler's own account of a recording: CA's
Events as the recorder writes them, or CA's klog output (`--ca-log`), paired decision by decision
with a replay run through the command line (the in-process backend on a real loopback port).

The recorded cluster: Deployment `web` (one CPU a pod) goes from 0 to 4 replicas at 1.5 s and back
to 0 at 12.5 s, on group `general` (2-CPU nodes, 60 s to boot). CA's part, as CA's rules give it:
a scale-up 0->2 in its first loop after the pods appear (at 5 s), then both nodes, empty since
they registered at about 70 s, removed together once unneeded for 10 minutes (at 675 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.simulator.agreement import agree
from cloudprovider_grpc.simulator.ca_account import CADecision
from cloudprovider_grpc.simulator.report import Decision
from tests.simulator.recordings import CA_CLOUD, CA_LOG
from tests.simulator.recordings import with_ca_account as _recording

pytestmark = pytest.mark.integration


def _replay(tmp_path: Path, rec: Path, *extra: str) -> tuple[int, str, Path]:
    cloud = tmp_path / "cloud.yaml"
    cloud.write_text(yaml.safe_dump(CA_CLOUD))
    out = tmp_path / "out"
    args = ["simulate", "--replay", str(rec), "--provider", "sim", "--cloud", str(cloud), "--duration", "40m"]
    return main([*args, "--quiet", "--out", str(out), *extra]), str(out), out


def _outcomes(out: Path) -> list[tuple[str, float | None]]:
    a = json.loads((out / "report.json").read_text())["agreement"]
    return [(r["outcome"], r["offset"]) for r in a["rows"]]


def test_a_replay_shows_its_agreement_with_the_events_ca_emitted(tmp_path: Path, capsys) -> None:
    rc, _, out = _replay(tmp_path, _recording(tmp_path / "rec"))
    assert rc == 0
    printed = capsys.readouterr().out
    assert (
        "agreement with cluster-autoscaler: 3 of 3 decisions matched within 10s "
        "(0 early, 0 late, 0 different size, 0 different group, 0 missed, 0 extra)"
    ) in printed
    assert _outcomes(out) == [("matched", 5.0), ("matched", 5.0), ("matched", 5.0)]
    rows = json.loads((out / "report.json").read_text())["agreement"]["rows"]
    assert [(r["ca"]["kind"], r["ca"]["node"], r["simulated"]["group"]) for r in rows] == [
        ("scale-up", "", "general"),
        ("scale-down", "node-a", "general"),
        ("scale-down", "node-b", "general"),
    ]
    page = (out / "report.html").read_text()
    assert 'id="agreement"' in page and page.count('data-outcome="matched"') == 3
    assert '"ca_decisions":[' in page  # drawn on the panels by the page's script
    targets = json.loads((out / "report.json").read_text())["agreement"]["ca_targets"]
    assert targets == [{"t": 5.3, "targets": {"general": 2}}]


def test_a_longer_unneeded_time_shows_the_removals_late(tmp_path: Path, capsys) -> None:
    rec = _recording(tmp_path / "rec")
    rc, _, out = _replay(tmp_path, rec, "--set", "autoscaler.scale-down-unneeded-time=20m")
    assert rc == 0
    assert _outcomes(out) == [("matched", 5.0), ("late", 605.0), ("late", 605.0)]
    assert "1 of 3 decisions matched within 10s (0 early, 2 late," in capsys.readouterr().out


def test_a_short_replay_misses_what_ca_did_after_it(tmp_path: Path) -> None:
    rec = _recording(tmp_path / "rec")
    rc, _, out = _replay(tmp_path, rec, "--duration", "5m")
    assert rc == 0
    assert _outcomes(out) == [("matched", 5.0), ("missed", None), ("missed", None)]


def test_cas_log_gives_the_same_table(tmp_path: Path, capsys) -> None:
    rec = _recording(tmp_path / "rec", with_events=False)
    log = tmp_path / "ca.log"
    log.write_text(CA_LOG)
    rc, _, out = _replay(tmp_path, rec, "--ca-log", str(log))
    assert rc == 0
    assert _outcomes(out) == [("matched", 5.0), ("matched", 5.0), ("matched", 5.0)]
    assert "3 of 3 decisions matched within 10s" in capsys.readouterr().out
    a = json.loads((out / "report.json").read_text())["agreement"]
    assert a["source"] == "cluster-autoscaler's log ca.log"


def test_a_recording_without_cas_account_replays_as_before(tmp_path: Path, capsys) -> None:
    rc, _, out = _replay(tmp_path, _recording(tmp_path / "rec", with_events=False))
    assert rc == 0
    assert "agreement" not in capsys.readouterr().out
    assert "agreement" not in json.loads((out / "report.json").read_text())
    assert 'id="agreement"' not in (out / "report.html").read_text()


def test_ca_log_needs_a_replay(tmp_path: Path, capsys) -> None:
    scenario = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "burst.yaml"
    assert main(["simulate", str(scenario), "--ca-log", str(tmp_path / "x"), "--out", str(tmp_path)]) == 2
    assert "--ca-log FILE goes with --replay DIR" in capsys.readouterr().err


def test_every_variant_reads_against_the_baselines_agreement(tmp_path: Path, capsys) -> None:
    rec = _recording(tmp_path / "rec")
    rc, _, out = _replay(
        tmp_path, rec, "--variant", "slow:autoscaler.scale-down-unneeded-time=20m", "--workers", "1"
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "baseline agreement with cluster-autoscaler: 3 of 3 decisions matched within 10s" in printed
    header, base, slow = printed.splitlines()[-4:-1]
    assert header.split()[-2:] == ["matched", "CA"]
    assert base.split()[0] == "baseline" and base.split()[-1] == "3/3"
    assert slow.split()[0] == "slow" and slow.split()[-1] == "1/3"
    assert _outcomes(out / "slow") == [("matched", 5.0), ("late", 605.0), ("late", 605.0)]
    assert "baseline: agreement with cluster-autoscaler: 3 of 3" in (out / "compare.html").read_text()


def _d(t: float, kind: str, group: str, delta: int = 0) -> Decision:
    return Decision(t, 0, kind, group=group, delta=delta)


def test_the_pairing_names_each_kind_of_difference() -> None:
    ca = [
        CADecision(0.0, "scale-up", "a", 2),
        CADecision(100.0, "scale-up", "a", 3),
        CADecision(200.0, "scale-up", "b", 1),
        CADecision(300.0, "scale-up-timeout", "a"),
        CADecision(400.0, "scale-down", "", -1, node="unknown"),
    ]
    sim = [
        _d(-30.0, "scale-up", "a", 2),  # the only +2 of a: early
        _d(104.0, "scale-up", "a", 1),  # a, within the interval, by another number
        _d(205.0, "scale-up", "c", 1),  # another group
        _d(408.0, "scale-down", "z", -1),  # a removal in any group, as CA's node is unknown
        _d(500.0, "scale-down", "a", -1),  # CA did no such thing
    ]
    a = agree(ca, sim, 10.0, "test")
    assert [(r["outcome"], r["offset"]) for r in a.rows] == [
        ("early", -30.0),
        ("different size", 4.0),
        ("different group", 5.0),
        ("missed", None),
        ("matched", 8.0),
        ("extra", None),
    ]
    assert a.line() == (
        "agreement with cluster-autoscaler: 1 of 5 decisions matched within 10s "
        "(1 early, 0 late, 1 different size, 1 different group, 1 missed, 1 extra)"
    )
