"""`cloudprovider-grpc simulate`: the simulator's command line.

The main CLI registers this subcommand through `cli_args.add_arguments` and `run_cli`. Exit
codes: 0 done, 1 the run failed (server unreachable, an RPC the loop cannot do without failed),
2 bad scenario, dump or configuration.

A run starts from a scenario file, or from a cluster (`--from-dump`, `--from-cluster`, or a
recording of one: `--replay`, see `replay_cli.py`) whose node groups come from the gRPC API;
what-if edits apply on top; `--compare` runs several CA settings on the same cluster and workload.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cloudprovider_grpc.simulator.agreement import CAAccount
    from cloudprovider_grpc.simulator.replay import Recording
    from cloudprovider_grpc.simulator.report import Report
    from cloudprovider_grpc.simulator.scenario import Scenario


def _has_emulator(backend: str) -> bool:
    """Whether `--emulate` would help: a known backend with a bundled API emulator (not the sim
    cloud, which needs none, nor a name no backend has)."""
    from cloudprovider_grpc.providers.registry import BACKENDS, backend_module

    return backend in BACKENDS and hasattr(backend_module(backend), "build_emulator")


def _fail(message: str, code: int = 2) -> int:
    print(f"cloudprovider-grpc simulate: {message}", file=sys.stderr)
    return code


def run_cli(args: argparse.Namespace) -> int:
    from cloudprovider_grpc.core.errors import ConfigError
    from cloudprovider_grpc.observability import logs
    from cloudprovider_grpc.simulator.client import RpcError
    from cloudprovider_grpc.simulator.scenario import ScenarioError

    # The in-process server's own log lines (a simulated stockout is an ERROR there) would interleave
    # with the decision log; the decision log already reports them in CA's terms, so only
    # critical server problems are shown.
    logs.setup("critical" if args.server is None else "warning", "text")
    if args.record is not None:
        from cloudprovider_grpc.simulator.replay_cli import record

        return record(args, _fail)
    sources = [args.scenario is not None, args.from_dump is not None, bool(args.from_cluster)]
    sources += [args.replay is not None, args.from_snapshotz is not None]
    if sum(sources) != 1:
        return _fail("give one of SCENARIO.yaml, --from-dump, --from-snapshotz, --from-cluster and --replay")
    problem = out_problem(args.out)
    if problem:
        return _fail(problem)
    try:
        scenario, notes, twin, account, variants = _prepare(args)
    except ScenarioError as exc:
        return _fail(str(exc))
    except ConfigError as exc:
        return _fail(str(exc))
    except RpcError as exc:
        return _fail(f"RPC to {args.server or 'the in-process server'} failed: {exc}", 1)
    # a twin of a running server's groups runs in-process: a what-if never touches the live cloud
    server = None if twin else args.server
    provider = None if twin else args.provider
    from cloudprovider_grpc.simulator.compare import ExecutorError

    try:
        if variants:
            return _compare(args, variants, notes, server, provider, account)
        report = _simulate(args, scenario, server, provider)
    except ScenarioError as exc:  # found once the node groups are known, e.g. a --drain-group
        return _fail(str(exc))
    except ConfigError as exc:
        backend = provider or scenario.provider
        hint = ""
        if server is None and not args.emulate and _has_emulator(backend):
            # a first run has no cloud account: every backend runs against its bundled emulator
            hint = f" (to run it against the bundled {backend} API emulator, add --emulate)"
        return _fail(f"{exc}{hint}")
    except RpcError as exc:
        return _fail(f"RPC to {server or 'the in-process server'} failed: {exc}", 1)
    except ExecutorError as exc:
        return _fail(str(exc), 1)
    report.notes = [*notes, *report.notes]
    if account is not None:
        report.agreement = account.against(report, scenario.autoscaler.scan_interval)
    _write_and_tell(args, report, scenario)
    return 0


def _prepare(
    args: argparse.Namespace,
) -> tuple[Scenario, list[str], bool, CAAccount | None, list[tuple[str, dict[str, Any]]]]:
    """The scenario after the what-if edits (saved with --write-scenario), its notes, whether it
    is a twin of a running server's groups, CA's own account of a replay, and the variants to
    compare."""
    data, notes, twin, account = _base(args)
    from cloudprovider_grpc.simulator import whatif

    whatif.apply(data, scales=args.scale, add=args.add_workload, drain=args.drain_group, sets=args.set)
    scenario = _validate(data, args)
    if args.write_scenario is not None:
        write_scenario(args.write_scenario, data, notes)
        print(f"wrote {args.write_scenario}")
    return scenario, notes, twin, account, _variants(args, data)


def _simulate(
    args: argparse.Namespace, scenario: Scenario, server: str | None, provider: str | None
) -> Report:
    """One run, its decision log printed as it goes unless --quiet."""
    from cloudprovider_grpc.simulator.runner import run

    echo = None if args.quiet else (lambda line: print(line, flush=True))
    return run(
        scenario,
        server=server,
        seed=args.seed,
        provider=provider,
        emulate=args.emulate,
        echo=echo,
        pace=False if args.no_pace else None,
    )


def _write_and_tell(args: argparse.Namespace, report: Report, scenario: Scenario) -> None:
    """The reports written into --out, the notes, the agreement with CA's own account, and the
    one-line outcome."""
    for note in report.write(args.out):
        print(note)
    for note in report.notes:
        print(f"note: {note}")
    if report.agreement is not None:
        print(report.agreement["line"])
    s = report.summary
    cost = f", estimated cost {_money(report.cost)}" if report.cost else ", cost unavailable (no pricing)"
    print(
        f"{scenario.name}: {s['loops']} loops, {s['nodes_added']} node(s) added, "
        f"{s['nodes_removed']} removed, max {s['max_pending_pods']} pending pods{cost}"
    )


def out_problem(out: Path) -> str:
    """Why the reports could not be written into `out`, or "": checked (by creating it and a
    probe file) before a simulation that may run for minutes, not after."""
    import tempfile

    if out.exists() and not out.is_dir():
        return f"--out {out}: exists and is not a directory"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        return f"--out {out}: cannot write there: {exc.strerror or exc}"
    return ""


def _money(cost: dict[str, Any]) -> str:
    return f"{cost['total']:.2f} {cost.get('unit', '')}".rstrip()


def _base(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], bool, CAAccount | None]:
    """The scenario mapping before edits, the notes about it, whether it is a `sim` twin, and
    what the real cluster-autoscaler decided meanwhile (a replay whose recording or `--ca-log`
    holds it)."""
    from cloudprovider_grpc.simulator.scenario import ScenarioError

    if args.ca_log is not None and args.replay is None:
        raise ScenarioError("--ca-log FILE goes with --replay DIR (the recording it is aligned to)")
    if args.scenario is not None:
        data, notes = _scenario_file(args)
        return data, notes, False, None
    if args.server is None and args.provider is None:
        raise ScenarioError("a cluster snapshot needs its node groups: give --server or --provider")
    return _from_cluster(args)


def _scenario_file(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The scenario file's mapping, with --autoscaler-flags over its `autoscaler:` section."""
    import yaml

    from cloudprovider_grpc.simulator.scenario import ScenarioError

    try:
        data = yaml.safe_load(args.scenario.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{args.scenario}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        from cloudprovider_grpc.config.settings import yaml_problem

        raise ScenarioError(yaml_problem(args.scenario, exc)) from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{args.scenario}: a scenario must be a mapping at the top level")
    if args.autoscaler_flags:
        from cloudprovider_grpc.simulator.flags import parse_flags, read_flag_text

        options, notes = parse_flags(read_flag_text(args.autoscaler_flags))
        data.setdefault("autoscaler", {}).update(options)
        return data, notes
    return data, []


def _cluster_objects(
    args: argparse.Namespace,
) -> tuple[list[dict[str, Any]], Recording | None, list[str], list[str]]:
    """The cluster's objects (from CA's snapshot, a recording, a dump or the live cluster), the
    recording when replaying, the groups CA's snapshot has template nodes for, and notes."""
    from cloudprovider_grpc.simulator.snapshot import load_dump, read_cluster

    if args.from_snapshotz is not None:
        from cloudprovider_grpc.simulator.snapshotz import load_snapshotz

        objects, dump_notes, templates = load_snapshotz(args.from_snapshotz)
        return objects, None, templates, dump_notes
    if args.replay is not None:
        from cloudprovider_grpc.simulator.replay import load_recording

        recording = load_recording(args.replay)
        return recording.objects, recording, [], []
    if args.from_dump:
        return load_dump(args.from_dump), None, [], []
    return read_cluster(args.kubeconfig, args.context), None, [], []


def _cloud_options(args: argparse.Namespace) -> dict[str, Any]:
    """--cloud FILE: the in-process backend's options (a scenario's `cloud:` section)."""
    import yaml

    from cloudprovider_grpc.simulator.scenario import ScenarioError

    if args.cloud is None:
        return {}
    try:
        cloud = yaml.safe_load(args.cloud.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{args.cloud}: cannot read: {exc}") from None
    if not isinstance(cloud, dict):
        raise ScenarioError(f"{args.cloud}: the backend's options must be a mapping")
    return cloud


def _from_cluster(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], bool, CAAccount | None]:
    """A scenario of a cluster snapshot or a recording, its node groups read from the server
    (or the in-process backend), and CA's own account of a replay."""
    from cloudprovider_grpc.simulator.flags import read_flag_text
    from cloudprovider_grpc.simulator.snapshot import build_scenario

    objects, recording, templates, dump_notes = _cluster_objects(args)
    flags = read_flag_text(args.autoscaler_flags) if args.autoscaler_flags else []
    cloud = _cloud_options(args)
    with group_source(args.server, args.provider, args.emulate, cloud) as client:
        provider = None if args.server else args.provider
        if recording is not None:
            snap = recording.scenario(
                client, provider=provider, name=args.name, duration=args.duration, flags=flags
            )
        else:
            snap = build_scenario(
                objects,
                client,
                provider=provider,
                name=args.name,
                duration=args.duration or "2h",
                flags=flags,
            )
        snap.notes = [*dump_notes, *snap.notes]
        missing = sorted(set(templates) - {g.id for g in client.node_groups()})
        if missing:
            snap.notes.append(
                f"cluster-autoscaler's snapshot has template nodes for group(s) the node groups here "
                f"lack: {', '.join(missing)}"
            )
        account = None
        if recording is not None:
            from cloudprovider_grpc.simulator import agreement

            account = agreement.CAAccount.of(recording, snap.groups_of_nodes, args.ca_log)
    if cloud and args.server is None:
        snap.scenario["cloud"] = cloud
    return snap.scenario, snap.notes, args.server is not None, account


class group_source:
    """A CAClient on a running server, or on an in-process backend, for reading node groups."""

    def __init__(
        self, server: str | None, provider: str | None, emulate: bool, options: dict[str, Any] | None = None
    ) -> None:
        self.server, self.provider, self.emulate = server, provider, emulate
        self.options = dict(options or {})
        self._close: list[Any] = []

    def __enter__(self) -> Any:
        from cloudprovider_grpc.simulator.client import CAClient, GrpcTransport, InProcessTransport

        if self.server is not None:
            transport = GrpcTransport(self.server)
            self._close.append(transport.close)
            transport.wait_ready()
            return CAClient(transport)
        from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
        from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
        from cloudprovider_grpc.simulator.clock import VirtualClock

        clock = VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))
        ctx = ProviderContext(options=self.options, clock=clock, inline_workers=True, emulate=self.emulate)
        cloud = build_provider(str(self.provider), ctx)
        cloud.start()
        self._close.append(lambda: cloud.stop(timeout=1.0))
        return CAClient(InProcessTransport(CloudProviderServicer(cloud)))

    def __exit__(self, *exc: object) -> None:
        for close in reversed(self._close):
            close()


def _validate(data: dict[str, Any], args: argparse.Namespace) -> Any:
    from cloudprovider_grpc.simulator.scenario import parse_scenario

    source = str(args.scenario or args.from_dump or args.from_snapshotz or args.replay or "the cluster")
    return parse_scenario(data, source)


def write_scenario(path: Path, data: dict[str, Any], notes: list[str]) -> None:
    """An ordinary scenario file; what could not be modelled heads it as comments."""
    import yaml

    head = "".join(f"# {line}\n" for line in ["Written by `cloudprovider-grpc simulate`.", *notes])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")


def _variants(args: argparse.Namespace, base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, scenario mapping) per variant: files merged over the base, or --variant edits."""
    import copy

    import yaml

    from cloudprovider_grpc.simulator import whatif
    from cloudprovider_grpc.simulator.scenario import ScenarioError, parse_scenario

    out: list[tuple[str, dict[str, Any]]] = []
    for path in args.compare:
        try:
            overlay = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ScenarioError(f"{path}: cannot read: {exc}") from None
        if not isinstance(overlay, dict):
            raise ScenarioError(f"{path}: a variant must be a mapping (e.g. autoscaler: {{...}})")
        out.append((path.stem, deep_merge(copy.deepcopy(base), overlay)))
    for spec in args.variant:
        name, colon, edits = spec.partition(":")
        if not colon or not name:
            raise ScenarioError(f"--variant {spec!r}: expected NAME:KEY=VALUE[,KEY=VALUE]")
        data = copy.deepcopy(base)
        for edit in edits.split(","):
            whatif.set_value(data, edit)
        out.append((name, data))
    if out:
        # the unmodified input always runs too, first: every variant reads as a change from it
        from cloudprovider_grpc.simulator.compare_report import BASELINE

        if BASELINE in (n for n, _ in out):
            raise ScenarioError(f"variant name {BASELINE!r} is taken by the unmodified input")
        out.insert(0, (BASELINE, copy.deepcopy(base)))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ScenarioError(f"variant names must be unique: {', '.join(names)}")
    for name, data in out:
        parse_scenario(data, f"variant {name}")
    return out


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    for k, v in overlay.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            deep_merge(base[k], v)
        else:
            base[k] = v
    return base


def _compare(
    args: argparse.Namespace,
    variants: list[tuple[str, dict[str, Any]]],
    notes: list[str],
    server: str | None,
    provider: str | None,
    account: CAAccount | None,
) -> int:
    from cloudprovider_grpc.simulator.compare import Job, run_jobs, table
    from cloudprovider_grpc.simulator.scenario import parse_scenario

    if server is not None:
        return _fail("--compare runs in-process backends only (a running server holds one cluster)")
    jobs = [Job(name, data, args.seed, provider, args.emulate, notes) for name, data in variants]
    results = run_jobs(jobs, args.executor, args.workers)
    args.out.mkdir(parents=True, exist_ok=True)
    for (_, data), result in zip(variants, results, strict=True):
        if account is not None:
            result.agreement = account.against(result, parse_scenario(data).autoscaler.scan_interval)
    for job, result in zip(jobs, results, strict=True):
        for note in result.write(args.out / job.name):
            print(note)
    from cloudprovider_grpc.simulator import compare_report

    for note in compare_report.write(args.out, [j.name for j in jobs], results):
        print(note)
    print(table(jobs, results))
    if results and results[0].agreement is not None:  # the baseline's: what every variant reads against
        print(f"baseline {results[0].agreement['line']}")
    return 0
