"""What the test suite's Kubernetes control plane costs: building kube-apiserver (and fetching etcd),
starting etcd + kube-apiserver until /readyz answers, and the memory both hold once ready.

`--cold` points the caches (Go modules, Go build cache, unpacked Debian packages) at an empty
temporary directory for the build measurement, as on a fresh machine or CI runner; without it the
shared caches are used (a no-op when already built).

    .venv/bin/python benchmarks/controlplane.py [--cold] [--starts 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import controlplane, kubebuilds  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="build with empty caches (a temporary dir)")
    parser.add_argument("--starts", type=int, default=3, help="warm starts to time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cpg-controlplane-bench-") as tmp:
        if args.cold:
            os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        began, cpu = time.monotonic(), _children_cpu()
        bins = controlplane.binaries()
        print(
            f"binaries ({'cold' if args.cold else 'cached'}): {time.monotonic() - began:.1f} s wall, "
            f"{_children_cpu() - cpu:.0f} s CPU (user+sys of go and its compilers, on {os.cpu_count()} cores)"
        )
        size = bins.apiserver.stat().st_size >> 20
        print(f"  kube-apiserver {kubebuilds.kubernetes_version()}: {size} MiB")

        starts: list[float] = []
        for i in range(args.starts):
            began = time.monotonic()
            with controlplane.control_plane(Path(tmp) / f"run{i}") as plane:
                starts.append(time.monotonic() - began)
                rss = {name: rss_mib(proc.pid) for name, proc in plane.processes.items()}
                ns = plane.namespace()
                began = time.monotonic()
                for n in range(20):
                    plane.kubectl("create", "configmap", f"c{n}", "-n", ns, "--from-literal=k=v")
                per_call = (time.monotonic() - began) / 20
            print(
                f"start {i + 1}: ready in {starts[-1]:.1f} s; RSS when ready "
                + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in rss.items())
                + f"; one kubectl create {per_call * 1000:.0f} ms"
            )
        print(f"ready in: median {statistics.median(starts):.1f} s, max {max(starts):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
