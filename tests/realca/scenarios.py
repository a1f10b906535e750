"""The real-CA scenarios: each phase makes the cluster need something, waits for CA's own decision
(read from its log), and checks the cluster and our server agree with it.

Phases are functions of a `Run` (one control plane, our server, the registrar and one CA process) so
one CA run goes through several of them, and `benchmarks/` can reuse them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.k8s.quantity import parse_quantity
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.realca import workloads as wl
from tests.realca.autoscaler import Autoscaler, Decision
from tests.realca.cluster import ControlPlane, Registrar, node_name, wait_for
from tests.realca.compare import Change
from tests.realca.server import OurServer
from tests.support.backends import BackendUnderTest

#: how long a phase may take before the test fails (CA loops every 2 s; machines boot in seconds)
PHASE_TIMEOUT = 120


@dataclass
class Run:
    plane: ControlPlane
    server: OurServer
    registrar: Registrar
    ca: Autoscaler

    @property
    def kube(self):
        return self.plane.kube

    def watch(self) -> list:
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


def phase_scale_down_named(r: Run, workload: str, group: str, *, expect_nodes: set[str]) -> list[Decision]:
    """Scale `workload` to zero: CA removes exactly the now-empty `expect_nodes` by name, and our
    server deletes exactly those instances."""
    ids = {
        name: node["spec"]["providerID"] for name, node in wl.nodes(r.kube).items() if name in expect_nodes
    }
    wl.scale(r.kube, workload, 0)
    got = r.ca.wait_decisions(
        lambda ds: set(downs(ds)) >= expect_nodes, PHASE_TIMEOUT, f"CA removing {sorted(expect_nodes)}"
    )
    assert set(downs(got)) == expect_nodes, f"CA removed {downs(got)}, want exactly {sorted(expect_nodes)}"
    wait_for(
        f"{sorted(ids.values())} gone from {group}",
        lambda: not set(ids.values()) & {i.id for i in r.server.instances(group)},
        PHASE_TIMEOUT,
        watch=r.watch(),
    )
    return got


def phase_stockout(r: Run, group: str, workload: wl.Workload) -> list[Decision]:
    """`workload` fits only `group`, whose cloud never creates machines: CA scales it up, sees the
    instance's errorInfo, backs the group off and deletes the failed placeholder; our server's target
    returns to where it was."""
    before = r.server.target(group)
    wl.apply(r.kube, workload)
    got = r.ca.wait_decisions(
        lambda ds: any(d.kind == "failed-removed" for d in ds) and any(d.kind == "backoff" for d in ds),
        PHASE_TIMEOUT,
        f"CA backing off {group} and removing its failed placeholder",
    )
    assert ups(got)[:1] == [(group, workload.replicas)], f"CA decided {[str(d) for d in got]}"
    assert any(d.kind == "failed-scale-up" and d.group == group for d in got), [str(d) for d in got]
    assert any(d.kind == "backoff" and d.group == group for d in got), [str(d) for d in got]
    wait_for(
        f"{group}'s target back to {before}",
        lambda: r.server.target(group) == before,
        PHASE_TIMEOUT,
        watch=r.watch(),
    )
    wait_for(
        f"{group} holds no instance", lambda: not r.server.instances(group), PHASE_TIMEOUT, watch=r.watch()
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
    Returns the workload changes it made, phase by phase (for the simulator's scenario)."""
    group = backend.e2e_group
    one = fits_one_node(r, group, "one")
    phase_scale_up(r, group, one, 1)
    placed = wl.running_on(r.kube, "one")
    phase_scale_down_named(r, "one", group, expect_nodes=set(placed.values()))
    assert r.server.target(group) == 0
    scarce = fits_one_node(r, backend.stockout_group, "scarce")
    phase_stockout(r, backend.stockout_group, scarce)
    return [Change(0, one, 1), Change(1, one, 0), Change(2, scarce, 1)]


def node_groups(r: Run) -> dict[str, str]:
    """node name -> group id for every Node the registrar made during the run."""
    return {name: group for name, (_, group) in r.registrar.created.items()}


__all__ = ["Run", "generic", "node_name", "run"]


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
        wait_for(
            f"{group} down to {len(by_group[group]) - count}",
            lambda g=group, c=count: len(live_ids(r, g)) == len(by_group[g]) - c,
            PHASE_TIMEOUT,
            watch=r.watch(),
        )


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


def phase_restart_mid_scale_up(r: Run, count_in_cloud, group: str = "workers") -> None:
    """CA scales `group` up by 3; our server is SIGKILLed while the machines are being created and
    restarted on its `--state-file`; CA's scale-up completes with exactly 3 machines, none doubled,
    and CA never asks again."""
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
