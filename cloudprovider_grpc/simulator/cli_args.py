"""The `simulate` subcommand's arguments and their help (cli.py runs what they ask)."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """\
examples:
  simulate examples/scenarios/burst.yaml --out out/burst
  simulate --from-dump examples/snapshot/cluster.json --provider vultr --emulate \\
      --scale deployment/web=2x --out out/x
  simulate --from-cluster --context prod --server localhost:8086 --write-scenario prod.yaml
  simulate examples/scenarios/burst.yaml --out out/compare \\
      --variant quick:autoscaler.scale-down-unneeded-time=2m
  simulate prod.yaml --compare fast.yaml slow.yaml --executor dask://scheduler:8786
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommand's arguments, in the order its help lists them."""
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "scenario",
        type=Path,
        nargs="?",
        metavar="SCENARIO.yaml",
        help="scenario file (see examples/scenarios), or none with --from-dump/--from-cluster",
    )
    _add_cluster_source(parser)
    from cloudprovider_grpc.simulator.replay_cli import add_record_arguments

    add_record_arguments(parser)
    _add_what_if(parser)
    _add_comparing(parser)
    _add_running(parser)


def _add_cluster_source(parser: argparse.ArgumentParser) -> None:
    """Where the cluster comes from when there is no scenario file: a dump, CA's snapshot, or a
    live cluster, with CA's own flags and the backend's options."""
    src = parser.add_argument_group("starting from a cluster")
    src.add_argument(
        "--from-dump",
        type=Path,
        metavar="FILE",
        help="the output of `kubectl get nodes,pods,daemonsets,pdb,priorityclasses,configmaps -A -o json`",
    )
    src.add_argument(
        "--from-snapshotz",
        type=Path,
        metavar="FILE",
        help="cluster-autoscaler's debugging snapshot (the JSON it serves at /snapshotz with "
        "--debugging-snapshot-enabled): its nodes, their pods and the pods it held unscheduled",
    )
    src.add_argument("--from-cluster", action="store_true", help="read the same objects from a live cluster")
    src.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig for --from-cluster (default: the usual)"
    )
    src.add_argument("--context", metavar="NAME", help="kubeconfig context for --from-cluster")
    src.add_argument(
        "--autoscaler-flags",
        metavar="FLAGS|FILE",
        help="cluster-autoscaler's command-line flags (as in its Deployment's args): a file, or inline "
        "after '=' (--autoscaler-flags='--expander=priority --scale-down-unneeded-time=5m')",
    )
    src.add_argument(
        "--cloud",
        type=Path,
        metavar="FILE.yaml",
        help="options of the in-process backend (a scenario's cloud: section), e.g. its emulator's",
    )
    src.add_argument(
        "--duration",
        help="how long to simulate a cluster snapshot (default 2h; a replay: the recording's length)",
    )
    src.add_argument("--name", default="my-cluster", help="the scenario name of a cluster snapshot")
    src.add_argument(
        "--write-scenario", type=Path, metavar="FILE", help="save the scenario (after what-if edits) to edit"
    )


def _add_what_if(parser: argparse.ArgumentParser) -> None:
    """Edits to the scenario before it runs."""
    what = parser.add_argument_group("what if")
    what.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="[NS/][KIND/]NAME=Nx|=N",
        help="scale a workload, e.g. deployment/web=2x (repeatable)",
    )
    what.add_argument(
        "--add-workload",
        action="append",
        default=[],
        type=Path,
        metavar="FILE.yaml",
        help="add workloads: Kubernetes manifests or scenario workload entries (repeatable)",
    )
    what.add_argument(
        "--drain-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="drain every node of a node group at the start (cordon, evict) (repeatable)",
    )
    what.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="set any scenario key, e.g. autoscaler.scale-down-unneeded-time=5m (repeatable)",
    )


def _add_comparing(parser: argparse.ArgumentParser) -> None:
    """Variants of the scenario run side by side, and where they run."""
    cmp = parser.add_argument_group("comparing settings")
    cmp.add_argument(
        "--compare",
        nargs="+",
        action="extend",
        type=Path,
        default=[],
        metavar="VARIANT.yaml",
        help="run the same cluster and workload once per file, each merged over the scenario, and "
        "once unmodified (`baseline`); writes compare.html and compare.csv beside each variant's report",
    )
    cmp.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="a variant given by --set edits instead of a file (repeatable)",
    )
    cmp.add_argument(
        "--executor",
        default="local",
        metavar="local|dask://HOST:PORT",
        help="where variants run: local worker processes (default) or an existing Dask cluster",
    )
    cmp.add_argument("--workers", type=int, default=0, help="local worker processes (default: one per CPU)")


def _add_running(parser: argparse.ArgumentParser) -> None:
    """The server, the outputs, the seed and the backend of the run."""
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="talk to a running externalgrpc server instead of starting ours in-process "
        "(with --from-dump/--from-cluster: only read its node groups, and simulate a twin of them)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("simulation"),
        metavar="DIR",
        help="where report.json, report.html, series.csv and timeline.png go (default ./simulation)",
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
