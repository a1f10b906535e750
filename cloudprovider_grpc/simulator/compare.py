"""Several CA settings on the same cluster and workload: one job per variant, one table.

Every variant is an independent, deterministic simulation (its own in-process server on a virtual
clock), so variants run anywhere and in any order and give the same report.json as a single run
of the same scenario and seed. Where they run is the one seam `run_jobs`:
- `local` (default): worker processes on this machine (`local:N` or `--workers N` for N of them;
  one worker runs them one after another in this process);
- `dask://HOST:PORT`: an existing Dask cluster (the optional `distributed` package), for sweeps
  larger than one machine; its workers need cloudprovider-grpc installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from cloudprovider_grpc.simulator.report import Report


class ExecutorError(RuntimeError):
    """The executor could not run the variants (a Dask scheduler out of reach)."""


@dataclass
class Job:
    """One variant: its name, the scenario mapping, and how to run it."""

    name: str
    scenario: dict[str, Any]
    seed: int = 0
    provider: str | None = None
    emulate: bool = False
    notes: list[str] = field(default_factory=list)


def simulate(job: Job) -> Report:
    """Run one job in this process (what every executor calls)."""
    from cloudprovider_grpc.observability import logs
    from cloudprovider_grpc.simulator.runner import run
    from cloudprovider_grpc.simulator.scenario import parse_scenario

    logs.setup("critical", "text")
    scenario = parse_scenario(job.scenario, f"variant {job.name}")
    report = run(scenario, seed=job.seed, provider=job.provider, emulate=job.emulate)
    report.notes = [*job.notes, *report.notes]
    return report


def run_jobs(jobs: Sequence[Job], executor: str = "local", workers: int = 0) -> list[Report]:
    """Reports in the order of `jobs`, whichever executor ran them."""
    if executor.startswith("dask://") or executor.startswith("tcp://"):
        return _dask(jobs, executor.removeprefix("dask://"))
    name, _, count = executor.partition(":")
    if name != "local":
        from cloudprovider_grpc.core.errors import ConfigError

        raise ConfigError("--executor", f"unknown executor {executor!r} (local, local:N or dask://HOST:PORT)")
    n = workers or (int(count) if count else min(len(jobs), os.cpu_count() or 1))
    if n <= 1 or len(jobs) <= 1:
        return [simulate(j) for j in jobs]
    # spawn: a forked child would inherit gRPC's threads and locks from a parent that used them
    with ProcessPoolExecutor(max_workers=min(n, len(jobs)), mp_context=get_context("spawn")) as pool:
        return list(pool.map(simulate, jobs))


def _dask(jobs: Sequence[Job], address: str) -> list[Report]:
    try:
        from distributed import Client
    except ImportError:
        from cloudprovider_grpc.core.errors import ConfigError

        raise ConfigError(
            "--executor", "dask:// needs the 'distributed' package (pip install 'cloudprovider-grpc[dask]')"
        ) from None
    url = address if "://" in address else f"tcp://{address}"
    try:
        client = Client(url, timeout=15)
    except (OSError, TimeoutError) as exc:
        raise ExecutorError(f"cannot reach the Dask scheduler at {url}: {exc}") from None
    try:
        futures = client.map(simulate, list(jobs), pure=False)
        return list(client.gather(futures))
    finally:
        client.close()


def _fmt(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.1f}m"


COLUMNS: list[tuple[str, Callable[[Report], str]]] = [
    ("node-hours", lambda r: f"{r.summary['node_hours']:.2f}"),
    ("cost", lambda r: f"{r.cost['total']:.2f}" if r.cost else "n/a"),
    ("pending p50", lambda r: _fmt(r.summary["pod_pending_seconds"]["p50"])),
    ("p99", lambda r: _fmt(r.summary["pod_pending_seconds"]["p99"])),
    ("max", lambda r: _fmt(r.summary["pod_pending_seconds"]["max"])),
    ("scale-ups", lambda r: str(len(r.of_kind("scale-up")))),
    ("scale-downs", lambda r: str(len(r.of_kind("scale-down")))),
    (
        "failed scale-ups",
        lambda r: str(
            sum(1 for d in r.decisions if d.kind in ("scale-up-failed", "scale-up-timeout", "scale-up-error"))
        ),
    ),
]


def _matched(r: Report) -> str:
    a = r.agreement
    return f"{a['counts']['matched']}/{a['ca_decisions']}" if a else "n/a"


def table(jobs: Sequence[Job], reports: Sequence[Report]) -> str:
    """The comparison as a plain-text table, one row per variant."""
    units = sorted({str(r.cost.get("unit", "")) for r in reports if r.cost})
    columns = list(COLUMNS)
    if any(r.agreement for r in reports):  # a replay with CA's own account
        columns.append(("matched CA", _matched))
    header = ["variant", *(name for name, _ in columns)]
    if units:  # the cost's unit once, in its heading
        header[2] = f"cost ({', '.join(units)})"
    rows = [[j.name, *(f(r) for _, f in columns)] for j, r in zip(jobs, reports, strict=True)]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), *(line(r) for r in rows)])
