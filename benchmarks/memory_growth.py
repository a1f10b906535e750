"""Where a backend's memory grows under fuzzing: tracemalloc inside a real `serve` process.

    .venv/bin/python benchmarks/memory_growth.py --backend alicloud [--requests 20000] [--top 12]

Starts `cloudprovider-grpc serve` for the backend as tests/support/backends.py runs it (with its
bundled emulator in the same process), with tracemalloc on; sends the cases benchmarks/robustness.py
sends (tests/support/fuzz.py, same seed); has the server write a tracemalloc snapshot (SIGUSR1) after
the warm-up and at the end; prints RSS at both points and the allocation sites whose live memory grew
most in between, each under the innermost frame in this project (the emulator's request log, a
client, a driver...). tracemalloc makes the server several times slower and larger, so RSS here is
not comparable with benchmarks/robustness.py's; the sites are what this is for.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import signal
import subprocess
import sys
import tempfile
import tracemalloc
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WARMUP = 2_000
#: where the server writes its snapshots (the child reads it at start)
SNAPSHOT_ENV = "MEMORY_GROWTH_SNAPSHOT"


def child(argv: list[str]) -> int:
    """Run `cloudprovider-grpc <argv>` with tracemalloc on; each SIGUSR1 writes a snapshot to
    $MEMORY_GROWTH_SNAPSHOT.<n> and then an empty `.<n>.done` marker."""
    tracemalloc.start(16)
    target = os.environ[SNAPSHOT_ENV]
    taken = [0]

    def snapshot(_signum: int, _frame: object) -> None:
        gc.collect()
        path = f"{target}.{taken[0]}"
        tracemalloc.take_snapshot().dump(path)
        Path(path + ".done").touch()
        taken[0] += 1

    signal.signal(signal.SIGUSR1, snapshot)
    from cloudprovider_grpc.cli import main

    return main(argv)


def site(trace: tracemalloc.Traceback) -> str:
    """The innermost frame in this project (else the innermost frame) of an allocation (tracemalloc
    orders frames oldest first)."""
    ours = [f for f in trace if f.filename.startswith(str(ROOT / "cloudprovider_grpc"))]
    frame = ours[-1] if ours else trace[-1]
    name = Path(frame.filename)
    shown = name.relative_to(ROOT) if name.is_relative_to(ROOT) else Path(*name.parts[-2:])
    return f"{shown}:{frame.lineno}"


def report(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int) -> str:
    size: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for stat in after.compare_to(before, "traceback"):
        where = site(stat.traceback)
        size[where] += stat.size_diff
        count[where] += stat.count_diff
    lines = [f"live Python memory grew by {sum(size.values()) / 2**10:+.1f} KiB; the largest sites:"]
    for where, grown in size.most_common(top):
        lines.append(f"  {grown / 2**10:+9.1f} KiB {count[where]:+8d} blocks  {where}")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        raise SystemExit(child(sys.argv[2:]))
    from tests.support import fuzz
    from tests.support.backends import backend
    from tests.support.ports import free_port
    from tests.support.probes import ServerProcess, poll

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    chosen = backend(args.backend)
    with tempfile.TemporaryDirectory(prefix="memory-growth-") as tmp:
        work = Path(tmp)
        port, mport = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
        env.update(chosen.extra_env)
        env.update({name: f"MARKER-{name.lower()}" for name in chosen.secret_env})
        env[SNAPSHOT_ENV] = str(work / "snapshot")
        command = [
            sys.executable,
            __file__,
            "--child",
            "serve",
            *chosen.serve_args,
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            f"127.0.0.1:{mport}",
        ]
        with (work / "out").open("wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        server = ServerProcess(proc, port, mport, work / "out", work / "out")

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"server exited:\n{server.output()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except (urllib.error.URLError, ConnectionError):
                return False

        def snapshot(n: int) -> tracemalloc.Snapshot:
            server.signal(signal.SIGUSR1)
            poll(lambda: (work / f"snapshot.{n}.done").exists(), 300, f"snapshot {n}", 0.2)
            return tracemalloc.Snapshot.load(str(work / f"snapshot.{n}"))

        try:
            poll(ready, 60, f"{chosen.name} server to become ready")
            channel = server.channel()
            tally = fuzz.Tally()
            before = None
            rss0 = 0
            for i, case in enumerate(fuzz.cases(seed=2026, count=WARMUP + args.requests)):
                fuzz.send(channel, case, tally)
                if i == WARMUP - 1:
                    before, rss0 = snapshot(0), server.rss_bytes()
            after, rss1 = snapshot(1), server.rss_bytes()
        finally:
            server.close()
        assert before is not None
        print(
            f"{chosen.name}: {args.requests:,} fuzzed requests after {WARMUP:,} of warm-up; RSS (with "
            f"tracemalloc) {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MB"
        )
        print(report(before, after, args.top))


if __name__ == "__main__":
    main()
