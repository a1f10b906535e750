"""The recording's event log: what is written reads back, a log cut short reads up to its last
flushed line, and a file that is not a log (or from a newer release) is refused by name."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cloudprovider_grpc.simulator.eventlog import EVENTS, FORMAT, Header, LogError, Writer, read
from tests.simulator.recordings import STARTED

pytestmark = pytest.mark.unit


def test_records_read_back_in_order_with_length_and_end_reason(tmp_path: Path) -> None:
    w = Writer(tmp_path, Header(STARTED, ["Deployment"]))
    w.write({"t": 1.5, "op": "update", "kind": "Deployment", "uid": "a", "replicas": 3})
    w.write({"t": 2.25, "op": "delete", "kind": "Deployment", "uid": "a"})
    w.close(10.0, "signal")
    assert not w.write({"t": 11.0, "op": "add", "kind": "Deployment", "uid": "b"})
    log = read(tmp_path)
    assert log.header.started == STARTED and log.header.kinds == ["Deployment"]
    assert [(r["t"], r["op"]) for r in log.records] == [(1.5, "update"), (2.25, "delete")]
    assert (log.length, log.end_reason) == (10.0, "signal")


def test_a_log_cut_short_reads_up_to_its_last_flushed_line(tmp_path: Path) -> None:
    w = Writer(tmp_path, Header(STARTED, ["Pod"]))
    w.write({"t": 4.0, "op": "add", "kind": "Pod", "uid": "p"})
    w.flush()
    w.write({"t": 5.0, "op": "delete", "kind": "Pod", "uid": "p"})  # never flushed: lost in a crash
    data = (tmp_path / EVENTS).read_bytes()
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / EVENTS).write_bytes(data)
    log = read(copy)
    assert [r["op"] for r in log.records] == ["add"]
    assert (log.length, log.end_reason) == (4.0, None)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"format": "something-else", "version": 1}, "not a workload log"),
        ({"format": FORMAT, "version": 99, "started": "2026-11-28T03:00:00Z"}, "newer than this release"),
        ({"format": FORMAT, "version": 1, "started": "yesterday"}, "bad 'started' time"),
    ],
)
def test_what_is_not_a_readable_log_is_refused_by_name(tmp_path: Path, header: dict, message: str) -> None:
    with gzip.open(tmp_path / EVENTS, "wt") as f:
        f.write(json.dumps(header) + "\n")
    with pytest.raises(LogError, match=message):
        read(tmp_path)


def test_a_record_without_op_or_time_is_refused_with_its_line(tmp_path: Path) -> None:
    with gzip.open(tmp_path / EVENTS, "wt") as f:
        f.write(json.dumps({"format": FORMAT, "version": 1, "started": "2026-11-28T03:00:00Z"}) + "\n")
        f.write(json.dumps({"t": "soon", "op": "add"}) + "\n")
    with pytest.raises(LogError, match=r"events.jsonl.gz:2: a record needs 'op'"):
        read(tmp_path)
