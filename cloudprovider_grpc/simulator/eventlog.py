"""The workload event log of a recording: what `simulate --record` writes and `--replay` reads.

A recording is a directory holding two files:

- `snapshot.json`: the cluster when the recording started, as a Kubernetes `List` of the objects
  watched (nodes, pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets,
  PodDisruptionBudgets) plus PriorityClasses and ConfigMaps, `managedFields` stripped. It is the
  same format `simulate --from-dump` reads, so a recording's start can also be simulated alone.
- `events.jsonl.gz`: gzip-compressed JSON lines. The first line is the header::

      {"format": "cloudprovider-grpc-workload-log", "version": 1,
       "started": "2026-11-28T03:00:00Z", "kinds": ["Node", "Pod", ...]}

  then one line per change of a workload, in the order they were seen::

      {"t": 12.345, "op": "update", "kind": "Deployment", "ns": "shop", "name": "web",
       "uid": "...", "replicas": 5}

  `t` is seconds since the start (milliseconds kept); `op` is `add`, `update` or `delete`; the
  other fields depend on the kind (below). Fields that did not change are left out of an update,
  and a pod template is written only when it is new or changed, which keeps a busy hour small.
  Two more operations carry no change: `relist` (the watch of `kind` had to list again, e.g. after
  `410 Gone`; the changes it found follow as ordinary records) and `end` (the last line: `t` is the
  recording's length, `reason` why it stopped). A log without `end` was cut short (a crash, a full
  disk); it is read up to its last complete line. An uncompressed `events.jsonl` is read as
  well (a log written by hand, or filtered with `zcat | jq | ...`).

Fields per kind:

| kind | fields |
|---|---|
| Deployment, StatefulSet, ReplicaSet (one that no Deployment owns) | `replicas`, `template` |
| Job | `parallelism`, `completions`, `suspend`, `done` (`Complete` or `Failed`), `template` |
| Pod (no controller, or one not watched) | `template` (labels, annotations, spec), `done`, `owner` |
| DaemonSet | `template` |
| PodDisruptionBudget | `spec` |
| Node | `providerID`, `labels` (recorded, not replayed: they name the group of a node CA removed) |
| Event (from `cluster-autoscaler`) | `reason`, `message`, `type`, `count`, `time`, `object` (all, always) |
| CAStatus (CA's `cluster-autoscaler-status` ConfigMap) | `status` |

Event and CAStatus are cluster-autoscaler's own account (ca_account.py); a log whose header lists
neither was recorded without it and replays without the agreement.

A reader of a newer `version` refuses the log rather than misreading it.
"""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

FORMAT = "cloudprovider-grpc-workload-log"
VERSION = 1
EVENTS = "events.jsonl.gz"
PLAIN_EVENTS = "events.jsonl"
SNAPSHOT = "snapshot.json"
OPS = ("add", "update", "delete", "relist", "end")


class LogError(ValueError):
    """A recording that cannot be read; the message names the file and the line."""


@dataclass
class Header:
    started: datetime
    kinds: list[str]
    version: int = VERSION


@dataclass
class Log:
    """A read event log: its header, its records in order, and how it ended."""

    header: Header
    records: list[dict[str, Any]] = field(default_factory=list)
    #: the recording's length in seconds: the `end` record's `t`, else the last record's
    length: float = 0.0
    #: why it stopped (`duration`, `signal`), or None when the log was cut short
    end_reason: str | None = None


class Writer:
    """Appends records to `events.jsonl.gz`; safe to call from several watch threads.

    `flush()` ends a gzip block (Z_SYNC_FLUSH), so whatever was flushed survives a crash and reads
    back up to the last flushed line."""

    def __init__(self, directory: Path, header: Header) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / EVENTS
        # written under another name until the header is in, then renamed (the open file goes on):
        # a reader never finds the log without its header, however early it looks
        partial = directory / f".{EVENTS}.partial"
        self._raw: IO[bytes] = open(partial, "wb")  # noqa: SIM115 - closed by close()
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb", mtime=0)
        self._lock = threading.Lock()
        self._closed = False
        self.count = 0
        head = {
            "format": FORMAT,
            "version": header.version,
            "started": header.started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "kinds": header.kinds,
        }
        self._line(head)
        self.flush()
        partial.replace(self.path)

    def _line(self, obj: dict[str, Any]) -> None:
        self._gz.write(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode() + b"\n")

    def write(self, record: dict[str, Any]) -> bool:
        """Append one record; False (and nothing written) once the log is closed."""
        with self._lock:
            if self._closed:
                return False
            self._line(record)
            self.count += 1
            return True

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._gz.flush(zlib.Z_SYNC_FLUSH)
                self._raw.flush()

    def close(self, t: float, reason: str) -> None:
        """Write the `end` record and close the file; later writes are dropped."""
        with self._lock:
            if self._closed:
                return
            self._line({"op": "end", "t": round(t, 3), "reason": reason})
            self._closed = True
            self._gz.close()
            self._raw.close()


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The complete lines of the log, stopping quietly where a cut-short file ends."""
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        n = 0
        try:
            for raw in f:
                n += 1
                if raw.endswith(b"\n"):
                    yield n, raw
        except (EOFError, zlib.error):
            return


def read(directory: Path) -> Log:
    """The event log of a recording directory."""
    path = directory / EVENTS
    if not path.is_file() and (directory / PLAIN_EVENTS).is_file():
        path = directory / PLAIN_EVENTS
    if not path.is_file():
        raise LogError(f"{directory}: no {EVENTS} (is this a directory written by --record?)")
    header: Header | None = None
    log: Log | None = None
    try:
        for n, raw in _lines(path):
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise LogError(f"{path}:{n}: not JSON: {exc.msg}") from None
            if not isinstance(obj, dict):
                raise LogError(f"{path}:{n}: expected a JSON object")
            if header is None:
                header = _header(obj, f"{path}:{n}")
                log = Log(header)
                continue
            assert log is not None
            op = obj.get("op")
            t = obj.get("t")
            if op not in OPS or not isinstance(t, int | float) or isinstance(t, bool):
                raise LogError(f"{path}:{n}: a record needs 'op' ({', '.join(OPS)}) and a number 't'")
            if op == "end":
                log.length, log.end_reason = float(t), str(obj.get("reason") or "")
                break
            log.records.append(obj)
            log.length = max(log.length, float(t))
    except (OSError, gzip.BadGzipFile) as exc:
        raise LogError(f"{path}: cannot read: {exc}") from None
    if log is None:
        raise LogError(f"{path}: empty (no header line)")
    return log


def _header(obj: dict[str, Any], where: str) -> Header:
    if obj.get("format") != FORMAT:
        raise LogError(f"{where}: not a workload log (format {obj.get('format')!r}, expected {FORMAT!r})")
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise LogError(f"{where}: bad version {version!r}")
    if version > VERSION:
        raise LogError(f"{where}: log version {version} is newer than this release reads ({VERSION})")
    try:
        started = datetime.fromisoformat(str(obj.get("started")).replace("Z", "+00:00"))
    except ValueError:
        raise LogError(f"{where}: bad 'started' time {obj.get('started')!r}") from None
    kinds = obj.get("kinds")
    return Header(started, [str(k) for k in kinds] if isinstance(kinds, list) else [], version)
