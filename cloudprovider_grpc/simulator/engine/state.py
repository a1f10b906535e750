"""What one simulation holds between loops, and the helpers every phase uses.

`EngineState` is the memory CA keeps across RunOnce calls (sigs-CA `pkg/core/static_autoscaler.go`
fields, `pkg/clusterstate/clusterstate.go`): the cached instance listings, scale-up requests in
flight, back-offs, templates, the scale-down planner's unneeded timers, and the report being built.
The phases (`cluster_state`, `scale_up`, `scale_down`) read and change it; `loop` calls them in
CA's order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.simulator.backoff import Backoff
from cloudprovider_grpc.simulator.client import CAClient, GroupOptions, InstanceInfo, RpcError
from cloudprovider_grpc.simulator.clock import VirtualClock
from cloudprovider_grpc.simulator.engine.pricing import RpcPricing
from cloudprovider_grpc.simulator.engine.scale_down.planner import DrainRules, ScaleDownPlanner
from cloudprovider_grpc.simulator.engine.scale_up.expanders import Chain
from cloudprovider_grpc.simulator.model import Node, NodeShape, Resources, add_into
from cloudprovider_grpc.simulator.predicates import Placement, StaticFitCache, resources_fit, static_fit
from cloudprovider_grpc.simulator.report import Recorder
from cloudprovider_grpc.simulator.scenario import Scenario
from cloudprovider_grpc.simulator.world import World, static_shape

RUNNING, CREATING, DELETING = 1, 2, 3


@dataclass
class ScaleUpRequest:
    increase: int
    time: float
    expected_by: float


class EngineState:
    """The state of one run; construct with clients bound to a server (see `loop.Simulation`)."""

    def __init__(
        self,
        scenario: Scenario,
        client: CAClient,
        world_client: CAClient,
        clock: VirtualClock,
        seed: int = 0,
        provider: str = "sim",
        echo: Callable[[str], None] | None = None,
        pace: bool = False,
    ) -> None:
        self.pace = pace
        self.s = scenario
        self.o = scenario.autoscaler
        self.client = client
        client.release = scenario.autoscaler.release()  # its GetOptions defaults as that CA sends them
        self.wclient = world_client
        self.clock = clock
        self.seed = seed
        self.provider = provider
        self.rng = random.Random(seed)
        self.world = World(scenario)
        self.rec = Recorder(scenario.start_time, echo)
        self.backoff = Backoff(
            self.o.initial_node_group_backoff_duration,
            self.o.max_node_group_backoff_duration,
            self.o.node_group_backoff_reset_timeout,
        )
        self.chain = Chain(self.o.expander)
        self.planner = ScaleDownPlanner(
            DrainRules(self.o.skip_nodes_with_system_pods, self.o.skip_nodes_with_local_storage),
            self.o.scale_down_non_empty_candidates_count,
            self.o.unremovable_node_recheck_timeout,
        )
        self.pricing = RpcPricing(client)
        self.fits = StaticFitCache()
        self.instances: dict[str, list[InstanceInfo]] = {}
        self.instances_at: dict[str, float] = {}
        self.invalid: set[str] = set()
        self.first_seen: dict[str, float] = {}
        self.seen_errors: set[str] = set()
        self.removed_ids: set[str] = set()
        self.requests: dict[str, ScaleUpRequest] = {}
        self.real_templates: dict[str, NodeShape] = {}
        self.world_templates: dict[str, NodeShape | None] = {}
        self._shapes: dict[tuple[str, bytes], NodeShape] = {}
        self._free: dict[int, Resources] = {}
        self.incorrect_since: dict[str, float] = {}
        self.last_scale_up = -math.inf
        self.last_delete = -math.inf
        self.last_failure = -math.inf
        self.lifetimes: dict[str, dict[str, Any]] = {}
        self.costs: dict[str, float] = {}
        self.cost_unavailable = ""
        self.tl: dict[str, Any] = {"t": [], "nodes": {}, "target": {}, "pending": []}
        self._last_no_scale_up: tuple[Any, ...] | None = None
        self._last_cooldown = ""
        self._skip_logged: set[tuple[str, str]] = set()
        self._group_ids: list[str] = []
        self._bounds: dict[str, dict[str, Any]] = {}
        self._seen_targets: dict[str, int] = {}  # target sizes as CA last knew them, for the timeline
        self._unknown_overrides: set[str] = set()
        self._kubelet_listing: dict[
            str, list[InstanceInfo]
        ] = {}  # the listing each group's kubelets last saw
        self._events = sorted(scenario.node_events, key=lambda e: e.at)
        self._events_done: set[int] = set()
        self._initialized = False  # CA's cleanUpIfRequired runs once, in the first loop
        self._healthy = True
        self._startup_times: dict[str, float] = {}  # per group, asked once (MaxNodeStartupTime)
        self._options_seen: dict[str, GroupOptions] = {}  # the last NodeGroupGetOptions answer per group
        self._interpod = any(c.shape.interpod for c in self.world.controllers)
        for sn in scenario.static_nodes:
            shape = static_shape(sn)
            for i in range(sn.count):
                name = sn.name if sn.count == 1 else f"{sn.name}-{i}"
                node = self.world.register(name, f"static://{name}", shape, 0.0)
                node.annotations.update(sn.annotations)

    def _placement(self) -> Placement | None:
        """The schedulable nodes and their pods for inter-pod predicates, or None when no
        workload has such constraints (the common case costs nothing)."""
        if not self._interpod:
            return None
        return Placement.of(n for n in self.world.nodes.values() if n.schedulable)

    def template_free(self, shape: NodeShape) -> Resources:
        """Allocatable minus the DaemonSet pods CA adds to a sanitized template node."""
        free = self._free.get(id(shape))
        if free is None:
            free = dict(shape.allocatable)
            for ds in self.world.daemonsets:
                if static_fit(ds, shape) and resources_fit(ds.requests, free):
                    add_into(free, ds.requests, -1)
            self._free[id(shape)] = free
        return free

    def _zero_or_max(self, gid: str) -> bool:
        """The group's zeroOrMaxNodeScaling option. CA reads GetOptions for every group it filters
        for scale-up; the simulator reuses the group's last answer (scale-down asks every loop a
        group has nodes) and asks only for a group it has never asked about."""
        seen = self._options_seen.get(gid)
        if seen is None:
            d = self._defaults()
            try:
                seen = self.client.options(gid, d) or d
            except RpcError:
                return False
            self._options_seen[gid] = seen
        return seen.zero_or_max_node_scaling

    def _defaults(self) -> GroupOptions:
        o = self.o
        return GroupOptions(
            o.scale_down_utilization_threshold,
            o.scale_down_gpu_utilization_threshold,
            o.scale_down_unneeded_time,
            o.scale_down_unready_time,
            o.max_node_provision_time,
            False,
            o.ignore_daemonsets_utilization,
        )

    def _drop_node(self, node: Node, t: float) -> None:
        self.world.remove_node(node.name, t)
        self.planner.forget(node.name)
        self._price_lifetime(node.provider_id, t)

    def _price_lifetime(self, provider_id: str, end: float) -> None:
        """Price a node's registered lifetime when it ends, while the server still knows it."""
        life = self.lifetimes.pop(provider_id, None)
        if life is None or self.cost_unavailable:
            return
        node = pb.ExternalGrpcNode(providerID=provider_id, name=life["name"], labels=life["labels"])
        price = self.wclient.node_price(node, self.clock.datetime(life["start"]), self.clock.datetime(end))
        if price is None:
            self.cost_unavailable = f"PricingNodePrice failed for {life['name']}"
            return
        self.costs[life["group"]] = self.costs.get(life["group"], 0.0) + price
