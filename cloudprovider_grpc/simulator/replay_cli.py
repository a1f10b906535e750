"""The record-and-replay options of `cloudprovider-grpc simulate`, and the `--record` command.

`--record DIR --from-cluster [--for DURATION]` watches a live cluster and writes a recording
(`record.py`, format in `eventlog.py`); `--replay DIR` is a fourth way to start a simulation
(beside a scenario file, `--from-dump` and `--from-cluster`), handled by the ordinary path in
`cli.py` through `replay.py`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("record and replay")
    group.add_argument(
        "--record",
        type=Path,
        metavar="DIR",
        help="with --from-cluster: watch the cluster and write its workload changes to DIR (the "
        "starting snapshot and an event log) until --for passes or SIGINT/SIGTERM; simulates nothing",
    )
    group.add_argument(
        "--for",
        dest="record_for",
        metavar="DURATION",
        help="how long --record watches, e.g. 1h (default: until interrupted)",
    )
    group.add_argument(
        "--replay",
        type=Path,
        metavar="DIR",
        help="simulate a recording: its snapshot, then its workload changes at their recorded times "
        "(node groups from --provider or --server, as with --from-dump); when the recording holds "
        "cluster-autoscaler's Events, the report shows how the simulation agrees with them",
    )
    group.add_argument(
        "--ca-log",
        type=Path,
        metavar="FILE",
        help="with --replay: cluster-autoscaler's own log over the recording (its klog output, e.g. "
        "`kubectl logs`), read for its decisions instead of its Events",
    )


def record(args: argparse.Namespace, fail: Callable[[str, int], int]) -> int:
    """`simulate --record DIR --from-cluster`: exit 0 when the log was written and closed."""
    from cloudprovider_grpc.observability import logs
    from cloudprovider_grpc.simulator.record import record_cluster
    from cloudprovider_grpc.simulator.scenario import ScenarioError, parse_duration

    if not args.from_cluster or args.scenario is not None or args.from_dump is not None or args.replay:
        return fail("--record DIR records a live cluster: give it with --from-cluster only", 2)
    duration = None
    if args.record_for is not None:
        try:
            duration = parse_duration(args.record_for)
        except ValueError as exc:
            return fail(f"--for: {exc}", 2)
    logs.setup("warning", "text")  # a watch that fails and resumes is worth a line
    print(
        f"recording into {args.record}" + (f" for {args.record_for}" if duration is not None else ""),
        flush=True,
    )
    try:
        recorder, reason = record_cluster(args.record, args.kubeconfig, args.context, duration)
    except ScenarioError as exc:
        return fail(str(exc), 1)
    except OSError as exc:
        return fail(f"{args.record}: cannot write: {exc.strerror}", 1)
    writer = recorder.writer
    count = writer.count if writer is not None else 0
    relisted = sum(recorder.relists.values())
    extra = f", {relisted} re-list(s) after 410 Gone" if relisted else ""
    how = "interrupted" if reason == "signal" else "done"
    print(
        f"recorded {count} change(s) over {recorder.now():.0f}s ({how}{extra}): {args.record}",
        flush=True,
    )
    return 0
