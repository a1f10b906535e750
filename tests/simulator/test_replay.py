"""`simulate --replay DIR` on recordings written in the documented log format: the replay's
pending-pod timeline follows the recorded workload changes loop by loop, what-if edits and
`--compare` apply to a replay, and what a replay cannot reproduce is said in its notes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudprovider_grpc.cli import main
from tests.simulator import recordings
from tests.simulator.recordings import deployment, template, wanted

pytestmark = pytest.mark.integration

NS = "shop"


def _records() -> tuple[list[dict[str, Any]], list[tuple[float, str, int]]]:
    """The log of a busy few minutes, and the pods each workload wants after each change."""
    head = {"ns": NS}
    records = [
        {"t": 25.0, "op": "update", "kind": "Deployment", "name": "web", "uid": "w", "replicas": 5, **head},
        {"t": 31.2, "op": "add", "kind": "Job", "name": "batch", "uid": "j", "parallelism": 4,
         "completions": 8, "suspend": False, "done": None, "template": template("batch", "1"), **head},
        {"t": 47.0, "op": "add", "kind": "Pod", "name": "debug", "uid": "p",
         "template": template("debug"), "done": None, **head},
        {"t": 52.0, "op": "add", "kind": "Pod", "name": "trainer-0", "uid": "o", "owner": "TrainingRun",
         "template": template("trainer"), "done": None, **head},
        {"t": 80.0, "op": "update", "kind": "Pod", "name": "trainer-0", "uid": "o", "done": "Succeeded",
         **head},
        {"t": 64.9, "op": "add", "kind": "Deployment", "name": "api", "uid": "a", "replicas": 2,
         "template": template("api"), **head},
        {"t": 70.0, "op": "update", "kind": "Job", "name": "batch", "uid": "j", "done": "Complete", **head},
        {"t": 88.0, "op": "delete", "kind": "Pod", "name": "debug", "uid": "p", **head},
        {"t": 90.0, "op": "update", "kind": "Deployment", "name": "web", "uid": "w", "replicas": 1, **head},
        {"t": 90.0, "op": "update", "kind": "Node", "name": "n-1", "uid": "n"},
        {"t": 101.0, "op": "update", "kind": "Deployment", "name": "api", "uid": "a", "replicas": 3, **head},
        {"t": 115.0, "op": "delete", "kind": "Deployment", "name": "api", "uid": "a", **head},
    ]  # fmt: skip
    changes = [
        (25.0, "web", 5), (31.2, "batch", 4), (47.0, "debug", 1), (52.0, "trainer-0", 1),
        (64.9, "api", 2), (70.0, "batch", 0), (80.0, "trainer-0", 0),
        (88.0, "debug", 0), (90.0, "web", 1), (101.0, "api", 3), (115.0, "api", 0),
    ]  # fmt: skip
    return records, changes


def _recording(tmp_path: Path, length: float | None = 150.0) -> Path:
    records, _ = _records()
    return recordings.write(tmp_path / "rec", [deployment("web", NS, 2, "w")], records, length)


def _replay(rec: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert (
        main(["simulate", "--replay", str(rec), "--provider", "sim", "--quiet", "--out", str(out), *extra])
        == 0
    )
    return json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_the_pending_timeline_follows_the_recorded_changes(tmp_path: Path, capsys) -> None:
    report = _replay(_recording(tmp_path), tmp_path / "out")
    _, changes = _records()
    tl = report["timeline"]
    assert tl["t"][-1] == 150.0 and len(tl["t"]) == 16  # the recording's length, a loop every 10 s
    expected = [wanted(changes, t, {"web": 2}) for t in tl["t"]]
    assert tl["pending"] == expected
    assert max(expected) == 5 + 4 + 1 + 1 and expected[-1] == 1  # web, batch, debug, trainer at 1:00
    kinds = {w["name"]: (w["kind"], w["start"], w["end"]) for w in tl["workloads"]}
    assert kinds == {
        "web": ("Deployment", 0.0, None),
        "batch": ("Job", 31.2, 70.0),
        "debug": ("Pod", 47.0, 88.0),
        "api": ("Deployment", 64.9, 115.0),
        "trainer-0": ("Deployment", 52.0, 80.0),  # a controller's pod: CA may move it
    }
    out = capsys.readouterr().out
    assert "note: nodes are not replayed: the recorded cluster had 0 node(s) at the start" in out


def test_what_if_edits_apply_to_every_recorded_step(tmp_path: Path, capsys) -> None:
    written = tmp_path / "replay.yaml"
    report = _replay(
        _recording(tmp_path),
        tmp_path / "out",
        "--scale",
        "deployment/web=2x",
        "--write-scenario",
        str(written),
    )
    _, changes = _records()
    doubled = [(t, n, pods * 2 if n == "web" else pods) for t, n, pods in changes]
    assert report["timeline"]["pending"] == [wanted(doubled, t, {"web": 4}) for t in report["timeline"]["t"]]
    web = next(w for w in yaml.safe_load(written.read_text())["workloads"] if w["name"] == "web")
    assert (web["replicas"], web["schedule"]) == (
        4,
        [{"at": 25.0, "replicas": 10}, {"at": 90.0, "replicas": 2}],
    )
    capsys.readouterr()


@pytest.mark.slow
def test_compare_runs_each_variant_on_the_replay(tmp_path: Path, capsys) -> None:
    rec = _recording(tmp_path)
    args = [
        "simulate",
        "--replay",
        str(rec),
        "--provider",
        "sim",
        "--out",
        str(tmp_path / "cmp"),
        "--workers",
        "1",
    ]
    args += [
        "--variant",
        "quick:autoscaler.scan-interval=5s",
        "--variant",
        "slow:autoscaler.scan-interval=30s",
    ]
    assert main(args) == 0
    _, changes = _records()
    for name, loops in (("quick", 31), ("slow", 6)):
        tl = json.loads((tmp_path / "cmp" / name / "report.json").read_text())["timeline"]
        assert len(tl["t"]) == loops
        assert tl["pending"] == [wanted(changes, t, {"web": 2}) for t in tl["t"]]
    assert "quick" in capsys.readouterr().out


@pytest.mark.slow
def test_a_log_cut_short_replays_to_its_last_change_and_says_so(tmp_path: Path, capsys) -> None:
    report = _replay(_recording(tmp_path, length=None), tmp_path / "out")
    assert report["timeline"]["t"][-1] == 110.0  # the last loop within 115 s, the last record
    assert any("cut short" in n and "115s" in n for n in report["notes"])
    capsys.readouterr()


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "not a directory"),
        (lambda d: d.mkdir(), "no events.jsonl.gz"),
    ],
)
def test_a_bad_recording_fails_with_one_line(tmp_path: Path, capsys, setup, message: str) -> None:
    rec = tmp_path / "rec"
    setup(rec)
    assert main(["simulate", "--replay", str(rec), "--provider", "sim", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_record_needs_a_live_cluster(tmp_path: Path, capsys) -> None:
    assert main(["simulate", "--record", str(tmp_path / "r"), "--from-dump", "x.json"]) == 2
    assert "--record DIR records a live cluster: give it with --from-cluster only" in capsys.readouterr().err


def test_help_names_the_record_and_replay_flags(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--record DIR", "--for DURATION", "--replay DIR"):
        assert flag in text, flag
