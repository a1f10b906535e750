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

from cloudprovider_grpc.simulator.client import CAClient, GrpcTransport, InProcessTransport, Transport
from cloudprovider_grpc.simulator.clock import VirtualClock
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
    "in-process" (the same servicer called directly; for very long runs such as benchmarks).
    `pace`: wait for wall time to catch up with virtual time before each loop; defaults to True
    with `server` (real clock) and False in-process (virtual clock).
    """
    clock = VirtualClock(scenario.start_time)
    backend = provider or scenario.provider
    if server is not None:
        ca, world = GrpcTransport(server), GrpcTransport(server)
        try:
            ca.wait_ready()
            paced = True if pace is None else pace
            return _simulate(scenario, ca, world, clock, seed, f"external {server}", echo, paced)
        finally:
            ca.close()
            world.close()

    from cloudprovider_grpc.config import Settings
    from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
    from cloudprovider_grpc.server import start_server
    from cloudprovider_grpc.service import CloudProviderServicer

    # the scenario's `cloud:` section configures the scenario's own backend; another backend chosen
    # with --provider runs on its own defaults (with --emulate every backend needs nothing else)
    options = dict(scenario.cloud) if backend == scenario.provider else {}
    if echo is not None and backend != scenario.provider and scenario.cloud:
        echo(
            f"note: the scenario's cloud: section is for {scenario.provider!r}; "
            f"{backend!r} runs with its own defaults"
        )
    ctx = ProviderContext(options=options, clock=clock.now, inline_workers=True, emulate=emulate)
    cloud = build_provider(backend, ctx)
    if transport == "in-process":
        cloud.start()
        servicer = CloudProviderServicer(cloud)
        try:
            return _simulate(
                scenario,
                InProcessTransport(servicer),
                InProcessTransport(servicer),
                clock,
                seed,
                backend,
                echo,
                bool(pace),
            )
        finally:
            cloud.stop(timeout=1.0)
    if transport != "grpc":
        raise ValueError(f"unknown transport {transport!r} (grpc or in-process)")
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address=""), provider=cloud)
    ca, world = GrpcTransport(handle.address), GrpcTransport(handle.address)
    try:
        return _simulate(scenario, ca, world, clock, seed, backend, echo, bool(pace))
    finally:
        ca.close()
        world.close()
        handle.stop(grace=1.0)


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
