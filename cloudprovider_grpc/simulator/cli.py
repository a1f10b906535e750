"""`cloudprovider-grpc simulate SCENARIO.yaml`: the simulator's command line.

The main CLI registers this subcommand through `add_arguments` and `run_cli`. Exit codes: 0 done,
1 the run failed (server unreachable, an RPC the loop cannot do without failed), 2 bad scenario
or configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", type=Path, metavar="SCENARIO.yaml", help="scenario file (see examples/scenarios)"
    )
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="talk to a running externalgrpc server instead of starting ours in-process",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("simulation"),
        metavar="DIR",
        help="where report.json and timeline.png go (default ./simulation)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for the random expander (default 0)")
    parser.add_argument(
        "--provider", metavar="NAME", help="in-process backend (default: the scenario's, else sim)"
    )
    parser.add_argument(
        "--emulate", action="store_true", help="run the in-process backend against its bundled API emulator"
    )
    parser.add_argument(
        "--no-pace",
        action="store_true",
        help="with --server: run loops back to back instead of every scan-interval of wall time "
        "(CA's timeouts then fire before real machines can boot)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the per-loop decision log")


def run_cli(args: argparse.Namespace) -> int:
    from cloudprovider_grpc.errors import ConfigError
    from cloudprovider_grpc.simulator.client import RpcError
    from cloudprovider_grpc.simulator.runner import run
    from cloudprovider_grpc.simulator.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"cloudprovider-grpc simulate: {exc}", file=sys.stderr)
        return 2
    echo = None if args.quiet else (lambda line: print(line, flush=True))
    # The in-process server's own log lines (a simulated stockout is an ERROR there) would interleave
    # with the decision log; the decision log already reports them in CA's terms, so only
    # critical server problems are shown.
    from cloudprovider_grpc import logs

    logs.setup("critical" if args.server is None else "warning", "text")
    try:
        report = run(
            scenario,
            server=args.server,
            seed=args.seed,
            provider=args.provider,
            emulate=args.emulate,
            echo=echo,
        )
    except ConfigError as exc:
        backend = args.provider or scenario.provider
        hint = ""
        if args.server is None and not args.emulate and backend != "sim":
            # a first run has no cloud account: every backend runs against its bundled emulator
            hint = f" (to run it against the bundled {backend} API emulator, add --emulate)"
        print(f"cloudprovider-grpc simulate: {exc}{hint}", file=sys.stderr)
        return 2
    except RpcError as exc:
        where = args.server or "the in-process server"
        print(f"cloudprovider-grpc simulate: RPC to {where} failed: {exc}", file=sys.stderr)
        return 1
    for note in report.write(args.out):
        print(note)
    s = report.summary
    cost = (
        f", estimated cost {report.cost['total']:.2f}" if report.cost else ", cost unavailable (no pricing)"
    )
    print(
        f"{scenario.name}: {s['loops']} loops, {s['nodes_added']} node(s) added, "
        f"{s['nodes_removed']} removed, max {s['max_pending_pods']} pending pods{cost}"
    )
    return 0
