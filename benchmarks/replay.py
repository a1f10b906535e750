"""Wall time of replaying a recorded hour of a 1,000-node cluster, target < 30 s.

The recording is synthesised in the documented log format (`cloudprovider_grpc/simulator/
eventlog.py`), as `simulate --record` would have written it for a busy hour of the cluster of
benchmarks/simulate.py (1,000 nodes in 10 node groups, 20,000 pods of 20 Deployments):
- every Deployment rescaled once a minute by an autoscaler of pods (1,200 changes): the load
  doubles over 30 minutes, then falls below where it started;
- a batch Job of 40 one-CPU pods starting every two minutes, each running 4 to 12 minutes;
- 100 bare pods created and deleted;
- the real cluster's own node churn (recorded, not replayed);
about 1,700 records, with a pod template written once per object.

It then times what `simulate --replay DIR --provider sim --cloud FILE` does, in two steps: reading
the recording into a scenario (snapshot.json through NodeGroupForNode for each node, the event log
into schedules) and simulating the hour, with CA's call pattern (`rpc_profile: ca`) and `lean`, on
the in-process transport (the request bytes handed to the server's handlers without a socket, as
benchmarks/simulate.py does; over a loopback socket each of the ~400,000 NodeGroupForNode calls of
the `ca` profile would cost grpcio ~0.6 ms, see benchmarks/rpc_latency.py). Then the command itself,
over loopback gRPC with `--set rpc_profile=lean`, reports written. Wall and CPU seconds are both
printed: on a shared machine wall time also counts the other processes' turns.

Each measurement runs in a fresh process and prints its peak memory (the RSS high-water mark).
`--size 5000` is the same hour on a cluster five times as wide (5,000 nodes in 50 groups,
100,000 pods of 100 Deployments).

    .venv/bin/python benchmarks/replay.py [--size 1000|5000] [--keep DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import yaml  # noqa: E402
from simulate import DEFAULT_SIZE, SIZES, ClusterSize, in_child, peak_rss_mb, snapshot_objects  # noqa: E402

from cloudprovider_grpc.simulator import parse_scenario, run  # noqa: E402
from cloudprovider_grpc.simulator.eventlog import EVENTS, SNAPSHOT, Header, Writer  # noqa: E402

HOUR = 3600.0


def _template(app: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }


def synthesise(directory: Path, size: ClusterSize = DEFAULT_SIZE) -> tuple[dict[str, Any], int]:
    """Write the recording; returns the sim backend's options (its node groups) and the record count.

    A larger size is the same hour made wider: its Deployments (1,000 pods each), the batch Jobs'
    parallelism, the bare pods and the node churn all scale with the node count; at the default
    size the records (and the random draws behind them) are the ones every earlier figure used."""
    objects, options = snapshot_objects(size)
    per = size.pods // size.deployments
    wide = size.nodes // DEFAULT_SIZE.nodes
    deployments = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"app-{d}", "namespace": "default", "uid": f"deploy-{d}"},
            "spec": {"replicas": per, "template": _template(f"app-{d}", "500m", "1Gi")},
        }
        for d in range(size.deployments)
    ]
    for i, o in enumerate(objects):
        o.setdefault("apiVersion", "apps/v1" if o["kind"] == "DaemonSet" else "v1")
        o["metadata"].setdefault("uid", f"obj-{i}")
    directory.mkdir(parents=True, exist_ok=True)
    snapshot = {"apiVersion": "v1", "kind": "List", "items": [*objects, *deployments]}
    (directory / SNAPSHOT).write_text(json.dumps(snapshot, separators=(",", ":")), encoding="utf-8")

    rng = random.Random(7)
    records: list[dict[str, Any]] = []
    head = {"ns": "default"}
    replicas = [per] * size.deployments
    for minute in range(60):
        # a peak: load doubles over 30 minutes (about 300 nodes more than the cluster has), then
        # falls below the start (scale-downs); each Deployment a few per cent off the trend
        trend = 1 + minute / 30 if minute < 30 else 2.0 - (minute - 30) / 25
        for d in range(size.deployments):
            replicas[d] = max(1, round(per * trend * rng.uniform(0.95, 1.05)))
            t = minute * 60 + rng.uniform(0, 60)
            records.append({"t": t, "op": "update", "kind": "Deployment", "name": f"app-{d}",
                            "uid": f"deploy-{d}", "replicas": replicas[d], **head})  # fmt: skip
    for j in range(30):
        t = j * 120 + rng.uniform(0, 30)
        name, uid = f"batch-{j}", f"job-{j}"
        records.append({"t": t, "op": "add", "kind": "Job", "name": name, "uid": uid,
                        "parallelism": 40 * wide, "completions": 40 * wide, "suspend": False, "done": None,
                        "template": _template(name, "1", "2Gi"), **head})  # fmt: skip
        done = t + rng.uniform(240, 720)
        if done < HOUR:
            records.append({"t": done, "op": "update", "kind": "Job", "name": name, "uid": uid,
                            "done": "Complete", **head})  # fmt: skip
    for p in range(100 * wide):
        t = rng.uniform(0, HOUR - 60)
        name, uid = f"debug-{p}", f"pod-{p}"
        records.append({"t": t, "op": "add", "kind": "Pod", "name": name, "uid": uid,
                        "template": _template(name, "250m", "256Mi"), "done": None, **head})  # fmt: skip
        records.append({"t": min(HOUR, t + rng.uniform(30, 900)), "op": "delete", "kind": "Pod",
                        "name": name, "uid": uid, **head})  # fmt: skip
    for n in range(150 * wide):
        t = rng.uniform(0, HOUR)
        records.append({"t": t, "op": rng.choice(["add", "delete"]), "kind": "Node", "ns": "",
                        "name": f"node-{n}", "uid": f"node-{n}"})  # fmt: skip
    records.sort(key=lambda r: r["t"])
    kinds = [
        "Node",
        "Pod",
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "Job",
        "DaemonSet",
        "PodDisruptionBudget",
    ]
    w = Writer(directory, Header(datetime(2026, 11, 28, 3, 0, tzinfo=UTC), kinds))
    for r in records:
        w.write({**r, "t": round(r["t"], 3)})
    w.close(HOUR, "duration")
    (directory / "cloud.yaml").write_text(yaml.safe_dump(options), encoding="utf-8")
    return options, len(records)


def replay_in_process(directory: Path, options: dict[str, Any], profile: str) -> dict[str, Any]:
    """Read the recording into a scenario and simulate the hour in-process: the figures."""
    from cloudprovider_grpc.simulator.cli import group_source
    from cloudprovider_grpc.simulator.replay import load_recording

    started, cpu = time.perf_counter(), time.process_time()
    with group_source(None, "sim", False, options) as client:
        snap = load_recording(directory).scenario(client, provider="sim")
    snap.scenario["cloud"] = options
    snap.scenario["rpc_profile"] = profile
    loaded = time.perf_counter() - started
    report = run(parse_scenario(snap.scenario), transport="in-process")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"wall": wall, "loaded": loaded, "cpu": cpu, "peak": peak_rss_mb(), "summary": report.summary}


def replay_command(directory: Path, out: Path) -> dict[str, Any]:
    """`simulate --replay` as a user types it: loopback gRPC, the reports written to `out`."""
    from cloudprovider_grpc.cli import main as cli_main

    argv = [
        "simulate",
        "--replay",
        str(directory),
        "--provider",
        "sim",
        "--cloud",
        str(directory / "cloud.yaml"),
    ]
    argv += ["--set", "rpc_profile=lean", "--quiet", "--out", str(out)]
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(argv)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"code": code, "wall": wall, "cpu": cpu, "peak": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the recording here and keep it")
    parser.add_argument(
        "--size", choices=sorted(SIZES), default="1000", help="the cluster's nodes (default 1000)"
    )
    parser.add_argument(
        "--out", type=Path, help="where the command writes its reports (default: a temporary folder)"
    )
    parser.add_argument(
        "--profile", action="append", choices=["ca", "lean"], help="in-process replays (default: both)"
    )
    parser.add_argument("--no-command", action="store_true", help="skip timing the command")
    args = parser.parse_args()
    size = SIZES[args.size]

    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp) / "recording"
        # written in a child process, so that no measured process holds the synthetic cluster
        options, count = in_child(synthesise, directory, size)
        size_kb = (directory / EVENTS).stat().st_size / 1e3
        snap_mb = (directory / SNAPSHOT).stat().st_size / 1e6
        print(f"recording: {count} records in {size_kb:.0f} kB gzip'd, snapshot {snap_mb:.1f} MB")
        for profile in args.profile or ["ca", "lean"]:
            f = in_child(replay_in_process, directory, options, profile)
            s = f["summary"]
            print(
                f"replay of 1 h, {size.nodes:,} nodes, rpc_profile={profile}: {f['wall']:.1f} s wall "
                f"({f['loaded']:.1f} s reading the recording), {f['cpu']:.1f} s CPU (target < 30 s), "
                f"peak RSS {f['peak']:.0f} MB; {s['loops']} loops, {s['nodes_added']} nodes added, "
                f"{s['nodes_removed']} removed, max {s['max_pending_pods']} pending"
            )
        if args.no_command:
            return
        f = in_child(replay_command, directory, args.out or Path(tmp) / "out")
        print(
            "`cloudprovider-grpc simulate --replay DIR --provider sim --cloud FILE --set rpc_profile=lean`: "
            f"exit {f['code']}, {f['wall']:.1f} s wall, {f['cpu']:.1f} s CPU, peak RSS {f['peak']:.0f} MB "
            "(reports written)"
        )


if __name__ == "__main__":
    main()
