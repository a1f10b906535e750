"""Loopback ports for servers that tests start as separate processes.

Asking the kernel for port 0 and closing the socket hands out a port from the ephemeral range, which
every outbound connection on the machine also draws from: between the moment the port is returned
and the moment the server binds it, a client socket (an emulator call, a health probe) can take it,
and the server fails with "Address already in use". Ports here come from below the ephemeral range
(Linux: /proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), where nothing allocates
by itself, and each pytest-xdist worker draws from its own slice, so two workers never race for one
port. A port handed out is not handed out again for `_HOLD` seconds, by any process: several
processes of one test draw ports (a shell harness starts one server after another, each binding a
second after its port was chosen), so the record is a small file shared under a lock, not memory.

`python -m tests.support.ports N` prints N distinct free ports on one line (for shell harnesses).
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

_LOW, _HIGH = 20000, 32000
_SLICES = 8
#: seconds a handed-out port stays reserved: ample for a server to start and bind it
_HOLD = 300.0
_RECORD = Path(tempfile.gettempdir()) / "cloudprovider-grpc-test-ports.json"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    high = min(_HIGH, _ephemeral_low())
    width = (high - _LOW) // _SLICES
    start = _LOW + (index % _SLICES) * width
    return range(start, start + width)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A free loopback port outside the ephemeral range, not handed out in the last `_HOLD` seconds."""
    with _RECORD.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        try:
            given = {int(k): float(v) for k, v in json.loads(f.read() or "{}").items()}
        except (ValueError, AttributeError):
            given = {}
        now = time.time()
        given = {p: t for p, t in given.items() if now - t < _HOLD}
        candidates = [p for p in _slice() if p not in given]
        random.shuffle(candidates)
        for port in candidates:
            if _bindable(port):
                given[port] = now
                f.seek(0)
                f.truncate()
                f.write(json.dumps(given))
                return port
    raise RuntimeError(f"no free loopback port left in {_slice()}")


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(" ".join(str(free_port()) for _ in range(count)))
