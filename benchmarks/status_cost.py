"""What the status costs: building the document (/status, and the status ConfigMap after each
Refresh), rendering it as JSON and HTML, and comparing it with the last one written, for a sim
cloud of GROUPS groups with MACHINES machines each and a creation in flight per group. Also the
RPC path's one added check with traces off (`tracing.TRACER is None`).

    .venv/bin/python benchmarks/status_cost.py [--groups 1000] [--machines 15] [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudprovider_grpc.observability import tracing  # noqa: E402
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider  # noqa: E402
from cloudprovider_grpc.server import status  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--machines", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    groups = [
        {"id": f"g{i}", "min_size": 0, "max_size": args.machines + 5, "initial_size": args.machines}
        for i in range(args.groups)
    ]
    provider = build_provider(
        "sim",
        ProviderContext(options={"groups": groups, "provisioning_delay": 3600}, inline_workers=True),
    )
    provider.start()
    for g in groups:
        provider.increase_size(str(g["id"]), 1)
    build, render_json, render_html, compare = [], [], [], []
    last = None
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        doc = status.snapshot(provider)
        t1 = time.perf_counter()
        text = status.to_json(doc)
        t2 = time.perf_counter()
        page = status.to_html(doc)
        t3 = time.perf_counter()
        same = status.stable(doc) == last
        last = status.stable(doc)
        t4 = time.perf_counter()
        build.append(t1 - t0)
        render_json.append(t2 - t1)
        render_html.append(t3 - t2)
        compare.append(t4 - t3)
    print(
        f"{args.groups} groups x {args.machines} machines (+1 creation each), median of {args.rounds} rounds:"
    )
    for name, values in (
        ("build the document", build),
        ("render JSON", render_json),
        ("render HTML", render_html),
        ("compare (stable)", compare),
    ):
        print(f"  {name:20} {statistics.median(values) * 1000:8.2f} ms")
    compact = status.to_json(doc, indent=None)
    print(
        f"  JSON size            {len(text) / 1024:8.1f} KiB "
        f"({len(compact) / 1024:.1f} KiB compact: the ConfigMap)"
    )
    print(f"  HTML size            {len(page) / 1024:8.1f} KiB")
    print(f"  unchanged on the last round: {same}")

    # what an RPC meets meanwhile: the worst TargetSize latency while the document is built, and
    # for comparison while a thread of the same length does plain Python work without the lock
    def worst_during(work: Callable[[], object]) -> float:
        worst = [0.0]
        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                provider.target_size("g0")
                worst[0] = max(worst[0], time.perf_counter() - t)

        thread = threading.Thread(target=reader)
        thread.start()
        for _ in range(3):
            work()
        stop.set()
        thread.join()
        return worst[0]

    busy = worst_during(lambda: status.stable(doc) == status.stable(doc))
    during = worst_during(lambda: status.snapshot(provider))
    print(
        f"  worst TargetSize while building it: {during * 1000:.2f} ms; "
        f"beside other Python work {busy * 1000:.2f} ms"
    )
    per = min(
        timeit.repeat("tracing.TRACER is not None", globals={"tracing": tracing}, number=1_000_000, repeat=5)
    )
    print(f"  traces off: the RPC path's added check costs {per * 1000:.1f} ns per call")
    provider.stop(timeout=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
