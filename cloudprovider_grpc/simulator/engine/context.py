"""The run context every phase is handed: what one simulation runs against, and nothing it decides.

The scenario and CA's options, CA's client and the simulator's own (`world_client`: the world's
side of the server, an operator's deletions, kubelets reading templates, pricing), the virtual
clock, the recorder of decisions and log lines, the seeded random source (the `random` expander),
and the world (nodes, pods, controllers). The phases' own memory lives in their own objects
(`cluster_state.ClusterState`, `scale_up.phase.ScaleUpPhase`, `scale_down.phase.ScaleDownPhase`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cloudprovider_grpc.simulator.client import CAClient
from cloudprovider_grpc.simulator.clock import VirtualClock
from cloudprovider_grpc.simulator.predicates import Placement
from cloudprovider_grpc.simulator.report import Recorder
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions, Scenario
from cloudprovider_grpc.simulator.world import World, static_shape


@dataclass
class RunContext:
    """One run's inputs and shared services; build with `RunContext.start`."""

    scenario: Scenario
    client: CAClient
    world_client: CAClient
    clock: VirtualClock
    rec: Recorder
    rng: random.Random
    world: World
    seed: int = 0
    provider: str = "sim"
    pace: bool = False
    #: any workload with inter-pod (anti-)affinity or spread constraints: only then do the phases
    #: build a `Placement` (the common case costs nothing)
    interpod: bool = field(init=False)

    def __post_init__(self) -> None:
        self.interpod = any(c.shape.interpod for c in self.world.controllers)

    @classmethod
    def start(
        cls,
        scenario: Scenario,
        client: CAClient,
        world_client: CAClient,
        clock: VirtualClock,
        seed: int = 0,
        provider: str = "sim",
        echo: Callable[[str], None] | None = None,
        pace: bool = False,
    ) -> RunContext:
        """The context of a new run: CA's client sends its release's GetOptions defaults, and the
        scenario's static nodes (outside every node group) are registered at time 0."""
        client.release = scenario.autoscaler.release()  # its GetOptions defaults as that CA sends them
        ctx = cls(
            scenario,
            client,
            world_client,
            clock,
            Recorder(scenario.start_time, echo),
            random.Random(seed),
            World(scenario),
            seed,
            provider,
            pace,
        )
        for sn in scenario.static_nodes:
            shape = static_shape(sn)
            for i in range(sn.count):
                name = sn.name if sn.count == 1 else f"{sn.name}-{i}"
                node = ctx.world.register(name, f"static://{name}", shape, 0.0)
                node.annotations.update(sn.annotations)
        return ctx

    @property
    def options(self) -> AutoscalerOptions:
        """CA's command-line options of the scenario."""
        return self.scenario.autoscaler

    def placement(self) -> Placement | None:
        """The schedulable nodes and their pods for inter-pod predicates, or None when no
        workload has such constraints."""
        if not self.interpod:
            return None
        return Placement.of(n for n in self.world.nodes.values() if n.schedulable)
