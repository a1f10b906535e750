"""Failover of `serve --leader-elect`: kill -9 of the leader in the middle of a 20-machine scale-up.

    .venv/bin/python benchmarks/failover.py [--rounds 10] [--backend cherry|vultr|exoscale ...]
                                            [--lease 15s --renew-deadline 10s --retry-period 2s]

Then `--upgrades` rolling upgrades (Exoscale, two replicas, each replaced in turn: a new one starts,
the old one gets SIGTERM) under a client calling every RPC in a loop through the same kind of port:
printed, the calls made and the calls that failed, by method.

Each round, on a real kube-apiserver and etcd (tests/support/controlplane.py) and the backend's
emulated cloud: two replicas sharing a --state-file, a caller asking NodeGroupTargetSize every 10 ms
through a loopback port that follows readiness the way a Service does (tests/support/ha.py),
IncreaseSize(20) to the leader, kill -9 of the leader at once, at a random moment between two
renewals of the Lease, the standby having seen the leader renew before. Checked every round: the cloud ends
with exactly 20 more machines, never more, nothing deleted. Printed: the failover time of each
round (last answer from the old leader to the first from the new one) and p50/max per backend and
overall. Defaults are cluster-autoscaler's lease settings.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudprovider_grpc.config import parse_duration  # noqa: E402
from tests.support.backends import backend  # noqa: E402
from tests.support.ha import Lease, kill_round, rolling_upgrade  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="kills per backend (default 10)")
    parser.add_argument("--backend", action="append", choices=["cherry", "vultr", "exoscale"])
    parser.add_argument("--lease", default="15s")
    parser.add_argument("--renew-deadline", default="10s")
    parser.add_argument("--retry-period", default="2s")
    parser.add_argument(
        "--upgrades", type=int, default=3, help="rolling upgrades under the every-RPC loop (default 3)"
    )
    args = parser.parse_args()
    from tests.support.controlplane import control_plane  # builds kube-apiserver on first use

    backends = args.backend or ["cherry", "vultr", "exoscale"]
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp, control_plane(Path(tmp) / "cp") as cp:
        print(
            f"lease {args.lease}, renew deadline {args.renew_deadline}, retry {args.retry_period}; "
            f"{args.rounds} kills per backend, 20 machines each"
        )
        for name in backends:
            for i in range(args.rounds):
                lease = Lease(
                    cp.kubeconfig,
                    cp.namespace("failover"),
                    duration=args.lease,
                    renew_deadline=args.renew_deadline,
                    retry_period=args.retry_period,
                )
                started = time.monotonic()
                # the crash falls anywhere between two renewals of the Lease
                phase = random.uniform(0, parse_duration(args.retry_period))
                failover = kill_round(name, backend(name), lease, Path(tmp) / f"{name}-{i}", phase)
                times.setdefault(name, []).append(failover)
                print(
                    f"  {name} round {i + 1}: failover {failover:5.2f} s, exactly 20 machines, none "
                    f"deleted (round {time.monotonic() - started:.0f} s)",
                    flush=True,
                )
        for i in range(args.upgrades):
            lease = Lease(
                cp.kubeconfig,
                cp.namespace("upgrade"),
                duration=args.lease,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            )
            loop = rolling_upgrade(Path(tmp) / f"upgrade-{i}", lease)
            failed = {method: len(calls) for method, calls in loop.failed.items()}
            print(
                f"  rolling upgrade {i + 1}: {loop.failures()} failed of {sum(loop.calls.values())} calls "
                f"{failed or ''}",
                flush=True,
            )
    print()
    every = [t for kills in times.values() for t in kills]
    for name, ts in [*times.items(), ("all", every)] if every else []:
        p50, worst = statistics.median(ts), max(ts)
        print(f"{name:9s} failover p50 {p50:5.2f} s  max {worst:5.2f} s  ({len(ts)} kills)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
