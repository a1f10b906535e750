"""The real-CA scenarios: each phase makes the cluster need something, waits for CA's own decision
(read from its log), and checks the cluster and our server agree with it.

Phases are functions of a `Run` (one control plane, our server, the registrar and one CA process) so
one CA run goes through several of them, and `benchmarks/` can reuse them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.k8s.quantity import parse_quantity
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.realca import workloads as wl
from tests.realca.autoscaler import Autoscaler, Decision
from tests.realca.cluster import ControlPlane, Process, Registrar, wait_for
from tests.realca.compare import Change
from tests.realca.kube import Kube
from tests.realca.server import OurServer
from tests.support.backends import BackendUnderTest

#: how long a phase may take before the test fails (CA loops every 2 s; machines boot in seconds)
PHASE_TIMEOUT = 120

#: node groups as CA saw them: bounds, templates, target sizes (`cloud_shape`)
Shape = tuple[dict[str, tuple[int, int]], dict[str, dict], dict[str, int]]


@dataclass
class Run:
    plane: ControlPlane
    server: OurServer
    registrar: Registrar
    ca: Autoscaler
    #: the backend's node groups as CA saw them (`cloud_shape`), recorded by scenarios that compare
    shape: Shape | None = None

    @property
    def kube(self) -> Kube:
        return self.plane.kube

    def watch(self) -> list[Process]:
        return [self.ca.process, self.server.process, *self.plane.processes]

    def diagnostics(self) -> str:
        return (
            f"CA decisions: {[str(d) for d in self.ca.decisions()]}\n"
            f"registrar errors (last 5): {self.registrar.errors[-5:]}\n"
            f"--- CA log tail\n{self.ca.log()[-6000:]}\n"
            f"--- server log tail\n{self.server.process.log_text()[-3000:]}"
        )


@contextlib.contextmanager
def run(
    plane: ControlPlane,
    backend: BackendUnderTest,
    version: str,
    workdir: Path,
    *,
    config: str | None = None,
    flags: Mapping[str, str] | None = None,
    state_file: Path | None = None,
) -> Iterator[Run]:
    """Our server on `backend`, the registrar and CA `version`; everything torn down and the cluster
    emptied afterwards (the control plane is shared between runs)."""
    server = OurServer(backend, workdir / "server", plane.pki, config=config, state_file=state_file)
    registrar = Registrar(plane.kube, server.endpoint).start()
    ca: Autoscaler | None = None
    try:
        ca = Autoscaler(version, plane, server.endpoint, workdir / "ca", flags)
        r = Run(plane, server, registrar, ca)
        ca.wait_running()
        yield r
    finally:
        if ca is not None:
            ca.stop()
        registrar.stop()
        server.stop()
        wl.cleanup(plane.kube)


# ---------------------------------------------------------------- what the scenarios read


def templates(r: Run) -> dict[str, dict[str, str]]:
    """group id -> the labels of its template node."""
    out: dict[str, dict[str, str]] = {}
    with r.server.endpoint.channel() as channel:
        stub = pb_grpc.CloudProviderStub(channel)
        for group in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups:
            res = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=group.id), timeout=5)
            out[group.id] = dict(decode_node(res.nodeBytes).metadata.labels)
    return out


def template_taints(r: Run, group: str) -> list[dict[str, str]]:
    with r.server.endpoint.channel() as channel:
        res = pb_grpc.CloudProviderStub(channel).NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id=group), timeout=5
        )
    return [
        {"key": t.key, "value": t.value, "effect": t.effect} for t in decode_node(res.nodeBytes).spec.taints
    ]


def selector_for(r: Run, group: str) -> dict[str, str]:
    """A node selector only `group`'s template matches: the first label (by key) whose value no other
    group's template has."""
    labels = templates(r)
    mine = labels[group]
    for key in sorted(mine):
        if key == "kubernetes.io/hostname":
            continue
        if all(other.get(key) != mine[key] for gid, other in labels.items() if gid != group):
            return {key: mine[key]}
    raise AssertionError(f"group {group}'s template has no label that tells it from the others: {labels}")


def live_ids(r: Run, group: str) -> list[str]:
    return [
        i.id
        for i in r.server.instances(group)
        if i.status.instanceState != pb.InstanceStatus.instanceDeleting
    ]


def group_nodes(r: Run, group: str) -> set[str]:
    """Names of the registrar's Nodes that are instances of `group`."""
    ids = {i.id for i in r.server.instances(group)}
    return {name for name, node in wl.nodes(r.kube).items() if node["spec"].get("providerID") in ids}


def ups(decisions: list[Decision]) -> list[tuple[str, int]]:
    return [(d.group, d.delta) for d in decisions if d.kind == "scale-up"]


def downs(decisions: list[Decision]) -> list[str]:
    return [d.node for d in decisions if d.kind == "scale-down"]


# ---------------------------------------------------------------- phases


def phase_scale_up(r: Run, group: str, workload: wl.Workload, delta: int) -> list[Decision]:
    """`workload` fits only `group`: CA scales exactly that group by exactly `delta`, the pods run on
    its new nodes, and our server's target follows."""
    before = r.server.target(group)
    wl.apply(r.kube, workload)
    got = r.ca.wait_decisions(lambda ds: ups(ds), PHASE_TIMEOUT, f"CA's scale-up for {workload.name}")
    assert ups(got) == [(group, delta)], f"CA decided {[str(d) for d in got]}, want {group} +{delta}"
    placed = wl.wait_running(r.kube, workload.name, workload.replicas, PHASE_TIMEOUT, r.watch())
    assert set(placed.values()) <= group_nodes(r, group), f"pods on {placed}, not all on {group}'s nodes"
    assert r.server.target(group) == before + delta
    return got


def phase_scale_down_named(
    r: Run, workload: str, group: str, *, candidates: set[str], count: int
) -> list[Decision]:
    """Scale `workload` to zero: CA removes exactly `count` of the now-empty `candidates` by name
    (which ones among equal nodes is CA's choice: the group goes down to its min size), and our
    server deletes exactly those instances and keeps the others."""
    ids = {name: node["spec"]["providerID"] for name, node in wl.nodes(r.kube).items() if name in candidates}
    assert set(ids) == candidates, f"nodes {sorted(candidates - set(ids))} are not registered"
    wl.scale(r.kube, workload, 0)
    got = r.ca.wait_decisions(
        lambda ds: len(downs(ds)) >= count, PHASE_TIMEOUT, f"CA removing {count} of {sorted(candidates)}"
    )
    removed = downs(got)
    assert len(removed) == count and set(removed) <= candidates, (
        f"CA removed {removed}, want {count} of {sorted(candidates)}"
    )
    gone = {ids[name] for name in removed}
    kept = set(ids.values()) - gone

    def deleted_exactly() -> bool:
        now = set(live_ids(r, group))
        return not gone & now and kept <= now

    wait_for(
        f"{sorted(gone)} gone from {group}, {sorted(kept)} kept",
        deleted_exactly,
        PHASE_TIMEOUT,
        watch=r.watch(),
    )
    return got


def phase_stockout(r: Run, group: str, workload: wl.Workload, delta: int | None = None) -> list[Decision]:
    """`workload` fits only `group`, whose cloud never creates machines: CA scales it up by `delta`
    (default: one node per replica; fewer when the group's machines already hold some of the pods),
    sees the instance's errorInfo, backs the group off and deletes the failed placeholder; our
    server's target and instances return to where they were."""
    before = r.server.target(group)
    machines = {i.id for i in r.server.instances(group)}
    wl.apply(r.kube, workload)
    got = r.ca.wait_decisions(
        lambda ds: any(d.kind == "failed-removed" for d in ds) and any(d.kind == "backoff" for d in ds),
        PHASE_TIMEOUT,
        f"CA backing off {group} and removing its failed placeholder",
    )
    want = workload.replicas if delta is None else delta
    assert ups(got)[:1] == [(group, want)], f"CA decided {[str(d) for d in got]}"
    assert any(d.kind == "failed-scale-up" and d.group == group for d in got), [str(d) for d in got]
    assert any(d.kind == "backoff" and d.group == group for d in got), [str(d) for d in got]
    wait_for(
        f"{group}'s target back to {before}",
        lambda: r.server.target(group) == before,
        PHASE_TIMEOUT,
        watch=r.watch(),
    )
    wait_for(
        f"{group} holds only its {len(machines)} machine(s) from before",
        lambda: {i.id for i in r.server.instances(group)} == machines,
        PHASE_TIMEOUT,
        watch=r.watch(),
    )
    # backed off: no new scale-up of the group while the pods stay pending
    r.ca.settle(3)
    later = r.ca.new_decisions()
    assert not [u for u in ups(later) if u[0] == group], (
        f"CA scaled {group} again during its backoff: {later}"
    )
    wl.scale(r.kube, workload.name, 0)
    return got


def fits_one_node(r: Run, group: str, name: str, replicas: int = 1) -> wl.Workload:
    """Pods pinned to `group` by its distinguishing label, each too big to share a node (60 % of the
    template's allocatable cpu), tolerating the group's taints."""
    with r.server.endpoint.channel() as channel:
        res = pb_grpc.CloudProviderStub(channel).NodeGroupTemplateNodeInfo(
            pb.NodeGroupTemplateNodeInfoRequest(id=group), timeout=5
        )
    node = decode_node(res.nodeBytes)
    cpu_milli = int(parse_quantity(node.status.allocatable["cpu"].string).value * 1000)
    tolerations = [
        {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in node.spec.taints
    ]
    return wl.Workload(
        name,
        replicas,
        cpu=f"{cpu_milli * 6 // 10}m",
        memory="256Mi",
        node_selector=selector_for(r, group),
        tolerations=tolerations,
    )


def generic(r: Run, backend: BackendUnderTest) -> list[Change]:
    """Every backend through its emulator: scale-up, named-node scale-down, the cloud's failure path.
    Returns the workload changes it made, phase by phase (for the simulator's scenario).

    Each group starts at a base size, its min (0 where the cloud allows empty groups, 1 on VKE), its
    machines running and registered: the workload asks for base + 1 nodes' worth of pods, one per
    node, so the base nodes take `base` of them and CA adds exactly one node; at zero replicas CA
    removes exactly one of the group's now-empty nodes, its own pick, down to the base."""
    group, scarce_group = backend.e2e_group, backend.stockout_group
    r.shape = cloud_shape(r)
    bounds, _, sizes = r.shape
    for g in (group, scarce_group):
        assert sizes[g] == bounds[g][0], (
            f"group {g} must start at its min size {bounds[g][0]}, not {sizes[g]} (CA would remove "
            "the surplus nodes before the scenario starts)"
        )
        wait_registered(r, g, sizes[g])
    base = sizes[group]
    one = fits_one_node(r, group, "one", replicas=base + 1)
    phase_scale_up(r, group, one, 1)
    phase_scale_down_named(r, "one", group, candidates=group_nodes(r, group), count=1)
    assert r.server.target(group) == base
    scarce = fits_one_node(r, scarce_group, "scarce", replicas=sizes[scarce_group] + 1)
    phase_stockout(r, scarce_group, scarce, delta=1)
    return [Change(0, one, base + 1), Change(1, one, 0), Change(2, scarce, sizes[scarce_group] + 1)]


def wait_registered(r: Run, group: str, count: int) -> None:
    """Until `group` has `count` running machines, each a registered Node (CA counts a machine
    without a Node as a node still coming up)."""

    def registered() -> bool:
        running = [
            i
            for i in r.server.instances(group)
            if i.status.instanceState == pb.InstanceStatus.instanceRunning
        ]
        return len(running) == count and len(group_nodes(r, group)) == count

    wait_for(f"{count} registered node(s) of {group}", registered, PHASE_TIMEOUT, watch=r.watch())


def cloud_shape(r: Run) -> Shape:
    """Our server's node groups as CA sees them: bounds, each template's allocatable resources,
    labels and taints, and each group's target size now (the input of `compare.mirror_cloud`)."""
    bounds: dict[str, tuple[int, int]] = {}
    tpls: dict[str, dict] = {}
    sizes: dict[str, int] = {}
    with r.server.endpoint.channel() as channel:
        stub = pb_grpc.CloudProviderStub(channel)
        for group in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups:
            bounds[group.id] = (group.minSize, group.maxSize)
            sizes[group.id] = stub.NodeGroupTargetSize(
                pb.NodeGroupTargetSizeRequest(id=group.id), timeout=5
            ).targetSize
            res = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=group.id), timeout=5)
            node = decode_node(res.nodeBytes)
            tpls[group.id] = {
                "allocatable": {k: q.string for k, q in node.status.allocatable.items()},
                "labels": dict(node.metadata.labels),
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints],
            }
    return bounds, tpls, sizes


def node_groups(r: Run) -> dict[str, str]:
    """node name -> group id for every Node the registrar made during the run."""
    return {name: group for name, (_, group) in r.registrar.created.items()}


# ---------------------------------------------------------------- the sim cloud's full set

#: The sim cloud for the full scenario set: `small` and `twin` have the same shape at different
#: prices (the price expander must choose `small`), `large` is the only group a 6-cpu pod fits,
#: `sticky` overrides scaleDownUnneededTime to an hour (CA must keep its empty node while it removes
#: the others after 6 s), and `scarce` can never create a machine (the stock-out).
SIM_FULL_CONFIG = """
sim:
  provisioning_delay: 2
  deletion_delay: 1
  groups:
    - {id: small, min_size: 1, max_size: 4, initial_size: 1, instance_type: sim-2x8,
       capacity: {cpu: "2", memory: 8Gi}, price_per_hour: 0.10}
    - {id: twin, min_size: 0, max_size: 4, instance_type: sim-2x8-twin,
       capacity: {cpu: "2", memory: 8Gi}, price_per_hour: 0.30}
    - {id: large, min_size: 0, max_size: 2, instance_type: sim-8x32,
       capacity: {cpu: "8", memory: 32Gi}, price_per_hour: 0.80}
    - {id: sticky, min_size: 0, max_size: 2, initial_size: 1, instance_type: sim-2x8-sticky,
       capacity: {cpu: "2", memory: 8Gi}, price_per_hour: 0.20,
       taints: [{key: dedicated, value: sticky, effect: NoSchedule}],
       options: {scale_down_unneeded_time: 3600}}
    - {id: scarce, min_size: 0, max_size: 2, instance_type: sim-2x8-scarce,
       capacity: {cpu: "2", memory: 8Gi}, price_per_hour: 0.05,
       taints: [{key: dedicated, value: scarce, effect: NoSchedule}], fail: {stockout_after: 0}}
"""

TYPE = "node.kubernetes.io/instance-type"

FLEX = wl.Workload("flex", 2, cpu="1500m", memory="1Gi")
BIG = wl.Workload("big", 1, cpu="6", memory="4Gi")
PINNED = wl.Workload("pinned", 3, cpu="1500m", memory="1Gi", node_selector={TYPE: "sim-2x8-twin"})
SCARCE = wl.Workload(
    "scarce-app",
    1,
    cpu="1500m",
    memory="1Gi",
    node_selector={TYPE: "sim-2x8-scarce"},
    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "scarce", "effect": "NoSchedule"}],
)


def phase_price(r: Run) -> None:
    """Two 1.5-cpu pods: one fits the existing `small` node, the other needs a node, which `small`,
    `twin` and `large` could all give; `--expander=price` asks both pricing RPCs and picks `small`."""
    before = r.server.rpc_counts()
    phase_scale_up(r, "small", FLEX, 1)
    after = r.server.rpc_counts()
    for rpc in ("PricingNodePrice", "PricingPodPrice"):
        assert after.get(rpc, 0) > before.get(rpc, 0), f"CA's price expander never called {rpc}: {after}"


def phase_scale_to_zero(r: Run, workloads: list[str], removed_groups: dict[str, int]) -> None:
    """Scale `workloads` to zero: CA removes the empty nodes down to each group's min size
    (`removed_groups`: how many nodes of each group), never `sticky`'s (its own unneeded time is an
    hour), and our server deletes exactly those instances."""
    by_group = {g: group_nodes(r, g) for g in (*removed_groups, "sticky")}
    want = sum(removed_groups.values())
    options_before = r.server.rpc_counts().get("NodeGroupGetOptions", 0)
    for name in workloads:
        wl.scale(r.kube, name, 0)
    got = r.ca.wait_decisions(
        lambda ds: len(downs(ds)) >= want, PHASE_TIMEOUT, f"CA removing {want} empty nodes"
    )
    removed = downs(got)
    for group, count in removed_groups.items():
        mine = [n for n in removed if n in by_group[group]]
        assert len(mine) == count, (
            f"CA removed {removed}; want {count} of {group}'s {sorted(by_group[group])}"
        )
    assert len(removed) == want, f"CA removed {removed}, want {want} nodes"
    r.ca.settle(3)
    later = downs(r.ca.new_decisions())
    assert not later, f"CA removed more nodes: {later}"
    assert by_group["sticky"] <= set(wl.nodes(r.kube)), "sticky's node went despite its 1 h unneeded time"
    assert r.server.rpc_counts().get("NodeGroupGetOptions", 0) > options_before, "CA never asked GetOptions"
    for group, count in removed_groups.items():
        left = len(by_group[group]) - count

        def down(g: str = group, n: int = left) -> bool:
            return len(live_ids(r, g)) == n

        wait_for(f"{group} down to {left}", down, PHASE_TIMEOUT, watch=r.watch())


def sim_full(r: Run) -> None:
    """The whole set on the sim cloud (CA runs with --expander=price and mutual TLS)."""
    assert r.server.refuses_plaintext(), "our server answered a client without TLS"
    phase_price(r)
    phase_scale_up(r, "large", BIG, 1)
    phase_scale_up(r, "twin", PINNED, 3)
    phase_scale_to_zero(r, ["flex", "big", "pinned"], {"small": 1, "large": 1, "twin": 3})
    phase_stockout(r, "scarce", SCARCE)


def sim_legacy(r: Run) -> None:
    """CA 1.34.1 (legacy wire fields): scale-up (price expander: legacy pricing fields), scale-down,
    per-group options (legacy nanosecond durations)."""
    phase_price(r)
    phase_scale_up(r, "large", BIG, 1)
    phase_scale_to_zero(r, ["flex", "big"], {"small": 1, "large": 1})


#: the workload changes of `sim_full` / `sim_legacy`, phase by phase, for the simulator's scenario
SIM_FULL_CHANGES = [
    Change(0, FLEX, 2),
    Change(1, BIG, 1),
    Change(2, PINNED, 3),
    Change(3, FLEX, 0),
    Change(3, BIG, 0),
    Change(3, PINNED, 0),
    Change(4, SCARCE, 1),
]
SIM_LEGACY_CHANGES = [Change(0, FLEX, 2), Change(1, BIG, 1), Change(2, FLEX, 0), Change(2, BIG, 0)]


# ---------------------------------------------------------------- a restart of our server mid-scale-up

#: Our server on Cherry, against an emulator that outlives it (the sim cloud lives inside our server's
#: process, so a restart would take the cloud with it: this scenario needs a cloud of its own). One
#: create per second (`rate-limit: 1`), so a scale-up by 3 is still in flight when the server dies.
RESTART_TOKEN = "realca-restart-token"
RESTART_PROJECT = 42


def restart_config(api_url: str) -> str:
    return f"""
cluster_name: realca
nodes: ["0:6:workers"]
cherry:
  api-url: "{api_url}"
  rate-limit: 1
  global: {{project-id: {RESTART_PROJECT}, plan: cloud_vps_4, region: eu_nord_1, os: ubuntu_24_04}}
"""


def phase_restart_mid_scale_up(
    r: Run, count_in_cloud: Callable[[], int], group: str = "workers"
) -> list[Change]:
    """CA scales `group` up by 3; our server is SIGKILLed while the machines are being created and
    restarted on its `--state-file`; CA's scale-up completes with exactly 3 machines, none doubled,
    and CA never asks again. Returns the workload change (for the simulator's scenario)."""
    r.shape = cloud_shape(r)
    app = fits_one_node(r, group, "restart", replicas=3)
    wl.apply(r.kube, app)
    got = r.ca.wait_decisions(lambda ds: ups(ds), PHASE_TIMEOUT, "CA's scale-up by 3")
    assert ups(got) == [(group, 3)], [str(d) for d in got]
    wait_for("the first machine in the cloud", lambda: count_in_cloud() >= 1, PHASE_TIMEOUT, watch=r.watch())
    r.server.kill()
    in_flight = count_in_cloud()
    assert in_flight < 3, f"all {in_flight} machines existed before the kill: nothing was in flight"
    r.server.restart()
    wl.wait_running(r.kube, app.name, 3, PHASE_TIMEOUT * 2, r.watch())
    assert count_in_cloud() == 3, f"{count_in_cloud()} machines in the cloud, want exactly 3"
    r.ca.settle(3)
    assert count_in_cloud() == 3
    assert not ups(r.ca.new_decisions()), "CA scaled up again after the restart"
    assert r.server.target(group) == 3
    return [Change(0, app, 3)]
