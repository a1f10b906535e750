"""The StackPointCloud emulator's cloud: organizations, clusters, node pools and nodes, how they are
seeded and saved, and the node state machine on the (injectable) clock with the JSON the API shows of
each. The HTTP side (authentication, routes, handlers) is in emulator.py; keeping the model apart
lets a reader follow the states without the request plumbing."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan
from cloudprovider_grpc.emulators.spc import seed
from cloudprovider_grpc.formats.spc_machine_specs import spec_of


def iso_time(ts: float) -> str:
    """A timestamp as the API shows it (ISO 8601 with microseconds, UTC, `Z`)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class SpcCloud(EmulatorServer):
    """The emulated cloud's state and its state machine; the API on top of it is `SpcEmulator`."""

    name = "spc"
    prefix = "/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tokens: Mapping[str, Iterable[int]] | None = None,
        draft_seconds: float = 2.0,
        building_seconds: float = 3.0,
        provisioned_seconds: float = 2.0,
        deleting_seconds: float = 3.0,
        pool_cpu_memory: bool = False,
        node_limit: int | None = None,
        clock: Clock | Callable[[], float] | None = None,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = None,
        state_file: Path | None = None,
    ) -> None:
        super().__init__(
            host, port, clock=clock, faults=faults, rate_limit_per_s=rate_limit_per_s, state_file=state_file
        )
        #: token -> organizations whose Owner it belongs to
        self.tokens: dict[str, set[int]] = {t: set(orgs) for t, orgs in (tokens or {}).items()}
        self.draft_seconds = draft_seconds
        self.building_seconds = building_seconds
        self.provisioned_seconds = provisioned_seconds
        self.deleting_seconds = deleting_seconds
        self.pool_cpu_memory = pool_cpu_memory
        #: most nodes one cluster may hold; an add beyond it is refused (the provider's quota)
        self.node_limit = node_limit
        self.orgs: dict[int, dict[str, Any]] = {}
        self.clusters: dict[int, dict[str, Any]] = {}
        self.pools: dict[int, dict[str, Any]] = {}
        self.nodes: dict[int, dict[str, Any]] = {}
        self.next_pool_pk = 27288
        self.next_node_pk = 9001
        #: the next N new nodes fail their build / stay in draft forever
        self.fail_next = 0
        self.stuck_next = 0

        self._add_routes()

    def _add_routes(self) -> None:
        """The API's routes, added by the emulator (emulator.py)."""

    # ------------------------------------------------------------------ seeding
    def add_org(self, org: int, name: str = "") -> None:
        with self.lock:
            self.orgs.setdefault(
                org, {"pk": org, "name": name or f"Organization {org}", "slug": f"org-{org}"}
            )

    def add_cluster(
        self,
        org: int,
        cluster: int,
        *,
        provider: str = seed.DEMO_PROVIDER,
        region: str = seed.DEMO_REGION,
        zone: str = seed.DEMO_ZONE,
        master_size: str = seed.DEMO_MASTER_SIZE,
        name: str = "",
    ) -> dict[str, Any]:
        """A running cluster with its initial master node (which can never be deleted)."""
        with self.lock:
            self.add_org(org)
            record = {
                "pk": cluster,
                "org": org,
                "instance_id": seed.cluster_instance_id(cluster),
                "name": name or f"Cluster {cluster}",
                "provider": provider,
                "region": region,
                "zone": zone,
                "k8s_version": "v1.8.3",
                "platform": "coreos",
                "channel": "stable",
                "state": "running",
                "is_failed": False,
                "created": self.clock(),
                "_masters": 0,
                "_workers": 0,
                "_pools": 0,
            }
            self.clusters[cluster] = record
            self._new_node(record, None, master_size, role="master", ready=True, initial=True)
            return record

    def add_pool(
        self,
        cluster: int,
        *,
        name: str,
        size: str,
        min_count: int = 0,
        max_count: int = 0,
        autoscaled: bool = True,
        running: int = 0,
        labels: str = "",
        gpu_size: str = "",
        gpu_count: int | None = None,
        is_default: bool = False,
        capacity: int | None = None,
    ) -> dict[str, Any]:
        """A node pool with `running` nodes already running. `capacity` caps the nodes the pool may
        hold (the provider's stock of its instance size): adds beyond it are refused."""
        with self.lock:
            c = self.clusters[cluster]
            c["_pools"] += 1
            pk = self.next_pool_pk
            self.next_pool_pk += 1
            pool = {
                "pk": pk,
                "cluster": cluster,
                "name": name,
                "instance_id": f"{c['instance_id']}-pool-{c['_pools']}",
                "instance_size": size,
                "platform": c["platform"],
                "channel": c["channel"],
                "root_disk_size": 50,
                "zone": c["zone"],
                "provider_subnet_id": "subnet-065b60e89fb5acf33",
                "provider_subnet_cidr": "172.23.4.0/24",
                "node_count": 0,
                "autoscaled": autoscaled,
                "min_count": min_count if autoscaled else 0,
                "max_count": max_count if autoscaled else 0,
                "network_components": [],
                "gpu_instance_size": gpu_size,
                "gpu_core_count": gpu_count,
                "labels": labels,
                "role": "worker",
                "state": "active",
                "is_default": is_default or not any(p["cluster"] == cluster for p in self.pools.values()),
                "config": {},
                "created": iso_time(self.clock()),
                "updated": iso_time(self.clock()),
                "_capacity": capacity,
            }
            self.pools[pk] = pool
            for _ in range(running):
                self._new_node(c, pool, size, ready=True)
            return pool

    def seed_demo(self, org: int, cluster: int) -> None:
        """The demo cluster `serve --provider spc --emulate` runs against (see seed.py)."""
        with self.lock:
            if cluster in self.clusters:
                return
            self.add_cluster(org, cluster, name="Demo Cluster")
            for name, size, lo, hi, running, autoscaled in seed.DEMO_POOLS:
                self.add_pool(
                    cluster,
                    name=name,
                    size=size,
                    min_count=lo,
                    max_count=hi,
                    autoscaled=autoscaled,
                    running=running,
                )

    # ------------------------------------------------------------------ inspection
    def node_records(self, cluster: int | None = None) -> list[dict[str, Any]]:
        """Every node as the API shows it now (also ones being deleted), sorted by pk."""
        with self.lock:
            self._purge()
            return [
                self._node_json(n) for _, n in sorted(self.nodes.items()) if cluster in (None, n["cluster"])
            ]

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "tokens": {t: sorted(o) for t, o in self.tokens.items()},
            "orgs": list(self.orgs.values()),
            "clusters": list(self.clusters.values()),
            "pools": list(self.pools.values()),
            "nodes": list(self.nodes.values()),
            "next_pool_pk": self.next_pool_pk,
            "next_node_pk": self.next_node_pk,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """The saved cloud replaces the seeded one (a node deleted before a restart stays deleted);
        tokens seeded from the configuration are kept."""
        for t, orgs in data.get("tokens", {}).items():
            self.tokens.setdefault(str(t), set()).update(int(o) for o in orgs)
        self.orgs = {int(o["pk"]): dict(o) for o in data.get("orgs", [])} or self.orgs
        self.clusters = {int(c["pk"]): dict(c) for c in data.get("clusters", [])}
        self.pools = {int(p["pk"]): dict(p) for p in data.get("pools", [])}
        self.nodes = {int(n["pk"]): dict(n) for n in data.get("nodes", [])}
        self.next_pool_pk = max(self.next_pool_pk, int(data.get("next_pool_pk", 0)))
        self.next_node_pk = max(self.next_node_pk, int(data.get("next_node_pk", 0)))

    # ------------------------------------------------------------------ the state machine
    def _new_node(
        self,
        cluster: dict[str, Any],
        pool: dict[str, Any] | None,
        size: str,
        *,
        role: str = "worker",
        ready: bool = False,
        initial: bool = False,
    ) -> dict[str, Any]:
        pk = self.next_node_pk
        self.next_node_pk += 1
        key = "_masters" if role == "master" else "_workers"
        cluster[key] += 1
        fail = stuck = False
        if not ready and role == "worker":
            if self.stuck_next > 0:
                self.stuck_next -= 1
                stuck = True
            elif self.fail_next > 0:
                self.fail_next -= 1
                fail = True
        now = self.clock()
        node = {
            "pk": pk,
            "cluster": cluster["pk"],
            "pool": pool["pk"] if pool else None,
            "pool_name": pool["name"] if pool else "",
            "instance_id": f"{cluster['instance_id']}-{role}-{cluster[key]}",
            "role": role,
            "group_name": f"autoscaling-{pool['instance_id']}" if pool else "",
            "platform": cluster["platform"],
            "image": "ami-0a7d051a1c4b54f65"
            if cluster["provider"] == "aws"
            else f"{cluster['platform']}-stable",
            "channel": cluster["channel"],
            "etcd_state": "kube_etcd",
            "root_disk_size": 50,
            "gpu_instance_size": pool.get("gpu_instance_size", "") if pool else "",
            "gpu_core_count": pool.get("gpu_core_count") if pool else None,
            "location": f"{cluster['region']}:{cluster['zone']}"
            if cluster["provider"] == "aws"
            else cluster["region"],
            "zone": cluster["zone"],
            "provider_subnet_id": pool.get("provider_subnet_id", "") if pool else "",
            "provider_subnet_cidr": pool.get("provider_subnet_cidr", "") if pool else "",
            "size": size,
            "_created": now - (self._build_time() if ready else 0.0),
            "_deleting_at": None,
            "_fail": fail,
            "_stuck": stuck,
            "_initial": initial,
            "_provider_node_id": seed.aws_instance_id(cluster["pk"], pk)
            if cluster["provider"] == "aws"
            else str(pk * 7919),
        }
        self.nodes[pk] = node
        if pool is not None:
            pool["node_count"] += 1
            pool["updated"] = iso_time(now)
        return node

    def _build_time(self) -> float:
        return self.draft_seconds + self.building_seconds + self.provisioned_seconds

    def _state(self, node: Mapping[str, Any]) -> str:
        if node["_deleting_at"] is not None:
            return "deleting"
        age = self.clock() - node["_created"]
        if node["_stuck"] or age < self.draft_seconds:
            return "draft"
        if node["_fail"]:
            return "failed"
        if age < self.draft_seconds + self.building_seconds:
            return "building"
        if age < self._build_time():
            return "provisioned"
        return "running"

    def _node_json(self, node: Mapping[str, Any]) -> dict[str, Any]:
        state = self._state(node)
        built = state not in ("draft",) and not node["_stuck"]
        out = {k: v for k, v in node.items() if not k.startswith("_")}
        out.update(
            {
                "provider_node_id": node["_provider_node_id"] if built else "",
                "private_ip": seed.private_ip(node["pk"]) if built else "",
                "public_ip": "",
                "state": state,
                "is_failed": state == "failed",
                "created": iso_time(node["_created"]),
                "updated": iso_time(max(node["_created"], node["_deleting_at"] or 0.0)),
            }
        )
        return out

    def _pool_json(self, pool: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: copy.deepcopy(v) for k, v in pool.items() if not k.startswith("_")}
        if self.pool_cpu_memory:
            spec = spec_of(str(pool["instance_size"]))
            out["cpu"], out["memory"] = (str(spec.cpu), str(spec.memory_mb)) if spec else ("", "")
        return out

    def _purge(self) -> None:
        """Drop nodes whose deletion finished (GET then answers 404, as the NKS SDK waits for)."""
        now = self.clock()
        for pk, node in list(self.nodes.items()):
            if node["_deleting_at"] is not None and now - node["_deleting_at"] >= self.deleting_seconds:
                del self.nodes[pk]

    def _cluster_json(self, c: Mapping[str, Any]) -> dict[str, Any]:
        self._purge()
        out = {k: v for k, v in c.items() if not k.startswith("_")}
        out["created"] = iso_time(c["created"])
        out["node_count"] = sum(1 for n in self.nodes.values() if n["cluster"] == c["pk"])
        return out
