"""Failover of `serve --leader-elect`: kill -9 of the leader in the middle of a 20-machine scale-up.

    .venv/bin/python benchmarks/failover.py [--rounds 10] [--backend cherry|vultr|exoscale ...]
                                            [--lease 15s --renew-deadline 10s --retry-period 2s]
                                            [--upgrades 3] [--parallel]

Then `--upgrades` rolling upgrades (Exoscale, two replicas, each replaced in turn in a Deployment's
order: a new one starts and, once it is Ready as a replica (`/readyz/replica`), an old one gets
SIGTERM, the standby first and the leader last, so the Lease changes hands once) under a client
calling every RPC in a loop through a port that follows the leader's readiness as the Service follows
the leader label, alternately in plaintext and under mutual TLS: printed, the calls made, the calls
that failed by method, the calls the old leader forwarded to its successor, and the hand-overs (old
replicas that began forwarding).

Per backend, on a real kube-apiserver and etcd (tests/support/controlplane.py) and the backend's
emulated cloud, `--rounds` kills in a row (tests/support/failover.py, kill_chain): two replicas sharing a
--state-file, a caller asking NodeGroupTargetSize every 10 ms through a loopback port that follows
readiness the way a Service does, IncreaseSize(20) to the leader, kill -9 of the leader at once, at
a random moment between two renewals of the Lease, the standby having seen the leader renew
before; a fresh replica joins as the next standby. Checked every round: the cloud ends with exactly
20 more machines, never more, nothing deleted. Printed: the failover time of each round (last
answer from the old leader to the first from the new one) and p50/max per backend and overall,
split into what the Lease still had to run at the kill (its duration after the killed leader's
last renewal: no successor may act before) and the takeover after it.
Defaults are cluster-autoscaler's lease settings. `--parallel` runs the backends at once (each on
its own Lease): a third of the time, on a machine that then works three times as hard.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloudprovider_grpc.core.durations import parse_duration  # noqa: E402
from tests.support.backends import backend  # noqa: E402
from tests.support.certs import write_pki  # noqa: E402
from tests.support.failover import Kill, kill_chain, rolling_upgrade  # noqa: E402
from tests.support.replicas import Lease  # noqa: E402


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
    parser.add_argument("--parallel", action="store_true", help="run the backends at once")
    args = parser.parse_args()
    from tests.support.controlplane import control_plane  # builds kube-apiserver on first use

    backends = args.backend or ["cherry", "vultr", "exoscale"]
    retry = parse_duration(args.retry_period)
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp, control_plane(Path(tmp) / "cp") as cp:

        def lease(prefix: str) -> Lease:
            return Lease(
                cp.kubeconfig,
                cp.namespace(prefix),
                duration=args.lease,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            )

        def chain(name: str) -> list[Kill]:
            started = time.monotonic()
            # the crash falls anywhere between two renewals of the Lease
            kills = kill_chain(
                name,
                backend(name),
                lease("failover"),
                Path(tmp) / name,
                args.rounds,
                lambda: random.uniform(0, retry),
            )
            shown = " ".join(f"{k.failover:.2f}" for k in kills)
            print(
                f"  {name}: {len(kills)} kills, exactly 20 machines each, none deleted; "
                f"failover (s): {shown} ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
            return kills

        at_once = ", backends at once" if args.parallel else ""
        print(
            f"lease {args.lease}, renew deadline {args.renew_deadline}, retry {args.retry_period}; "
            f"{args.rounds} kills per backend, 20 machines each{at_once}"
        )
        with ThreadPoolExecutor(len(backends) if args.parallel else 1) as pool:
            times = dict(zip(backends, pool.map(chain, backends), strict=True))
        for i in range(args.upgrades):
            pki = write_pki(Path(tmp) / f"pki-{i}") if i % 2 else None
            upgrade = rolling_upgrade(Path(tmp) / f"upgrade-{i}", lease("upgrade"), pki)
            loop = upgrade.loop
            failed = {method: len(calls) for method, calls in loop.failed.items()}
            forwarded = sum(
                int(n) for log in upgrade.logs for n in re.findall(r"(\d+) calls were forwarded", log)
            )
            handovers = sum("calls that reach this replica are forwarded" in log for log in upgrade.logs)
            mode = "mutual TLS" if pki else "plaintext"
            print(
                f"  rolling upgrade {i + 1} ({mode}): {loop.failures()} failed of "
                f"{sum(loop.calls.values())} calls {failed or ''}; {forwarded} forwarded by the old leader,"
                f" {handovers} hand-over(s)",
                flush=True,
            )
    print()
    every = [k for kills in times.values() for k in kills]
    for name, ks in [*times.items(), ("all", every)] if every else []:

        def p50_max(values: list[float]) -> str:
            return f"p50 {statistics.median(values):5.2f} s  max {max(values):5.2f} s"

        print(
            f"{name:9s} failover {p50_max([k.failover for k in ks])}  ({len(ks)} kills); of which the "
            f"lease left at the kill {p50_max([k.lease_left for k in ks])}, the takeover after it "
            f"{p50_max([k.takeover for k in ks])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
