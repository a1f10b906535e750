"""Wiring a scenario to a server: in-process (deterministic, virtual time) or an external one.

Without `server`, the scenario's backend (default `sim`) is built with the virtual clock and
inline workers (creates and deletes run at the start of each Refresh instead of in threads) and
served by our real gRPC server on a loopback port, so the run is repeatable to the byte. With
`server="HOST:PORT"` the simulator talks to whatever serves there, which runs on the real clock:
loops are paced to start every scan-interval of wall time (as CA's do), so provisioning delays and
CA's timeouts (max-node-provision-time, unneeded time) mean the same thing on both sides, and node
readiness follows the instance states the server reports. `pace=False` runs the loops back to
back instead; against a real cloud that would make CA's timeouts fire long before machines boot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cloudprovider_grpc.simulator.client import CAClient, GrpcTransport, InProcessTransport, Transport
from cloudprovider_grpc.simulator.clock import VirtualClock
from cloudprovider_grpc.simulator.collector import collector_paused
from cloudprovider_grpc.simulator.engine import Simulation
from cloudprovider_grpc.simulator.report import Report
from cloudprovider_grpc.simulator.scenario import Scenario


def run(
    scenario: Scenario,
    server: str | None = None,
    seed: int = 0,
    *,
    provider: str | None = None,
    emulate: bool = False,
    echo: Callable[[str], None] | None = None,
    transport: str = "grpc",
    pace: bool | None = None,
) -> Report:
    """Simulate `scenario` and return its Report.

    `server`: HOST:PORT of a running cloudprovider-grpc (or any externalgrpc server); None starts
    ours in-process. `provider`/`emulate`: the in-process backend (default: the scenario's) and
    whether it runs against its API emulator. `transport`: "grpc" (a real loopback socket) or
    "in-process" (the same request path without a socket; for very long runs such as benchmarks).
    `pace`: wait for wall time to catch up with virtual time before each loop; defaults to True
    with `server` (real clock) and False in-process (virtual clock). The cyclic garbage
    collector is paused meanwhile (`collector.py`: the world's pods and nodes hold no cycles).
    """
    with collector_paused():
        return _run(scenario, server, seed, provider, emulate, echo, transport, pace)


def _run(
    scenario: Scenario,
    server: str | None,
    seed: int,
    provider: str | None,
    emulate: bool,
    echo: Callable[[str], None] | None,
    transport: str,
    pace: bool | None,
) -> Report:
    clock = VirtualClock(scenario.start_time)
    if server is not None:
        return _run_external(scenario, server, clock, seed, echo, True if pace is None else pace)
    return _run_in_process(
        scenario, clock, seed, provider or scenario.provider, emulate, echo, transport, bool(pace)
    )


def _run_external(
    scenario: Scenario,
    server: str,
    clock: VirtualClock,
    seed: int,
    echo: Callable[[str], None] | None,
    paced: bool,
) -> Report:
    """Against a server elsewhere, which keeps its own clock: the report says so rather than let
    it pass for a repeatable run."""
    ca, world = GrpcTransport(server), GrpcTransport(server)
    try:
        ca.wait_ready()
        report = _simulate(scenario, ca, world, clock, seed, f"external {server}", echo, paced)
        report.notes.insert(
            0,
            f"the server at {server} runs on its own clock, not on the simulation's: its machines "
            "boot in real time"
            + (", CA's loops were paced to wall-clock time" if paced else ", and loops ran back to back")
            + ", so this report can differ from run to run",
        )
        return report
    finally:
        ca.close()
        world.close()


def _run_in_process(
    scenario: Scenario,
    clock: VirtualClock,
    seed: int,
    backend: str,
    emulate: bool,
    echo: Callable[[str], None] | None,
    transport: str,
    pace: bool,
) -> Report:
    """Our backend on the run's virtual clock, served over a loopback gRPC port, or called
    directly (`transport="in-process"`)."""
    from cloudprovider_grpc.config.settings import Settings
    from cloudprovider_grpc.grpcapi.servicer import CloudProviderServicer
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
    from cloudprovider_grpc.server.assembly import start_server

    # the scenario's `cloud:` section configures the scenario's own backend; another backend chosen
    # with --provider runs on its own defaults (with --emulate every backend needs nothing else)
    options = dict(scenario.cloud) if backend == scenario.provider else {}
    if echo is not None and backend != scenario.provider and scenario.cloud:
        echo(
            f"note: the scenario's cloud: section is for {scenario.provider!r}; "
            f"{backend!r} runs with its own defaults"
        )
    notes: list[str] = []
    if emulate:
        options, timing = with_simulated_timings(backend, options)
        if timing:
            notes.append(timing)
    # one clock for everything the backend times: its machinery, its HTTP client's back-offs and
    # rate limit, its emulator's boots and deletions (cloudprovider_grpc/core/clock.py)
    ctx = ProviderContext(options=options, clock=clock, inline_workers=True, emulate=emulate)
    cloud = build_provider(backend, ctx)
    if transport == "in-process":
        cloud.start()
        servicer = CloudProviderServicer(cloud)
        try:
            report = _simulate(
                scenario,
                InProcessTransport(servicer),
                InProcessTransport(servicer),
                clock,
                seed,
                backend,
                echo,
                pace,
            )
        finally:
            cloud.stop(timeout=1.0)
        return _with_clock_notes(report, notes, clock)
    if transport != "grpc":
        raise ValueError(f"unknown transport {transport!r} (grpc or in-process)")
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=cloud)
    ca, world = GrpcTransport(handle.address), GrpcTransport(handle.address)
    try:
        report = _simulate(scenario, ca, world, clock, seed, backend, echo, pace)
    finally:
        ca.close()
        world.close()
        handle.stop(grace=1.0)
    return _with_clock_notes(report, notes, clock)


def with_simulated_timings(backend: str, options: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """`options` with the backend's simulated emulator timers (`SIMULATED_TIMINGS` of its config)
    under `emulator:` where the scenario sets none, and a note saying which timers the run used."""
    from cloudprovider_grpc.providers.options import norm_key
    from cloudprovider_grpc.providers.registry import simulated_timings

    timings = simulated_timings(backend)
    if not timings:
        return options, ""
    out = dict(options)
    key = next((k for k in out if norm_key(k) == "emulator"), "emulator")
    emu = dict(out.get(key) or {})
    given = {norm_key(k): v for k, v in emu.items()}
    used = []
    for name, seconds in timings.items():
        if norm_key(name) in given:
            used.append(f"{name} {_secs(given[norm_key(name)])} (scenario)")
        else:
            emu[name] = seconds
            used.append(f"{name} {_secs(seconds)}")
    out[key] = emu
    return out, (
        f"the emulated {backend} cloud runs on simulated time: {', '.join(used)} "
        "(the backend's simulated timings; set cloud.emulator.* to change them)"
    )


def _secs(value: Any) -> str:
    try:
        return f"{float(value):g} s"
    except (TypeError, ValueError):
        return repr(value)


def _with_clock_notes(report: Report, notes: list[str], clock: VirtualClock) -> Report:
    """The run's clock facts in the report: the emulator's timings, and any simulated time the
    backend spent waiting inside RPCs (retry back-offs, rate-limit tokens), which delays CA's loops
    and would otherwise differ silently from a backend that never waits."""
    if clock.waited > 0:
        notes.append(
            f"the backend waited {clock.waited:g} s of simulated time inside RPCs (retry back-offs, "
            "rate limits): CA's loops started that much later"
        )
    late = sum(1 for line in report.log if "DEADLINE_EXCEEDED" in line)
    if late:
        notes.append(
            f"{late} RPC(s) overran CA's 5 s deadline in wall-clock time: a deadline cannot run on "
            "simulated time, so these results depend on how fast this machine ran the backend"
        )
    report.notes = [*notes, *report.notes]
    return report


def _simulate(
    scenario: Scenario,
    ca: Transport,
    world: Transport,
    clock: VirtualClock,
    seed: int,
    provider: str,
    echo: Callable[[str], None] | None,
    pace: bool,
) -> Report:
    client = CAClient(ca, profile=scenario.rpc_profile)
    sim = Simulation(
        scenario, client, CAClient(world), clock, seed=seed, provider=provider, echo=echo, pace=pace
    )
    return sim.run()
