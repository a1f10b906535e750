"""The canned-reply Go gRPC server (benchmarks/cannedgrpc) and per-process CPU accounting, shared by
rpc_latency.py and ca_loop.py.

The canned server is the floor of any gRPC server on this machine: grpc-go answering each call with
bytes prepared beforehand. Its reply table is recorded from our own server's answers (`record`), so
both servers send the same bytes and a difference in CPU per call is the cost of the server itself.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "benchmarks" / "cannedgrpc"
SERVICE = "/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of process `pid` so far (proc(5): fields 14 and 15 of
    /proc/PID/stat, in clock ticks). The command name (field 2) may hold spaces, so the fields are
    counted from the closing parenthesis."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def process_tree(pid: int) -> list[int]:
    """`pid` and its children: our server behind the compiled front is two processes."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def build() -> Path:
    """The cannedgrpc executable, built from source into the shared Go cache (tests/support/gotools)
    once per content of benchmarks/cannedgrpc."""
    sys.path.insert(0, str(ROOT))
    from tests.support import gotools

    sources = sorted(p for p in SOURCE.iterdir() if p.is_file())

    def prepare(scratch: Path) -> Path:
        for src in sources:
            (scratch / src.name).write_bytes(src.read_bytes())
        return scratch

    out = gotools.go_build("cannedgrpc", gotools.tree_key(*sources), prepare, ["."])
    return out / "cannedgrpc"


class Table:
    """A reply table for cannedgrpc: per method, a default reply and replies keyed by one string field
    of the request (named by its field-number path, e.g. (1,) for a group id, (1, 1) for a node's
    providerID)."""

    def __init__(self) -> None:
        self._methods: dict[str, dict] = {}

    def method(self, name: str, key: Iterable[int] = ()) -> None:
        self._methods.setdefault(SERVICE + name, {"key": list(key), "default": None, "by_key": {}})

    def record(self, name: str, call, request, key: str | None = None) -> None:
        """Call our server (`call` is a stub method) and store its answer, or its status, as the canned
        reply for this method: the default one, or the one for requests carrying `key`."""
        try:
            reply = {"b64": base64.b64encode(call(request).SerializeToString()).decode()}
        except grpc.RpcError as err:
            reply = {"code": err.code().value[0], "message": err.details() or ""}
        entry = self._methods[SERVICE + name]
        if key is None:
            entry["default"] = reply
        else:
            entry["by_key"][key] = reply

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self._methods))


@contextmanager
def serve(table: Table, port: int) -> Iterator[subprocess.Popen]:
    """cannedgrpc on 127.0.0.1:`port` answering from `table`, until the block ends."""
    binary = build()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replies.json"
        table.write(path)
        proc = subprocess.Popen(
            [str(binary), "-address", f"127.0.0.1:{port}", "-replies", str(path)], stdout=subprocess.DEVNULL
        )
        try:
            grpc.channel_ready_future(grpc.insecure_channel(f"127.0.0.1:{port}")).result(timeout=60)
            yield proc
        finally:
            proc.terminate()
            proc.wait(20)
