"""A StackPointCloud API emulator served over real HTTP, shipped with the product.

SPC was shut down around 2020, so this is a reconstruction of exactly the surface the fork and the
SDKs used (research note cherry-spc.md §B2, §B5), faithful where a source documents it:

- any base URL, no version prefix; Bearer tokens (only org Owners' tokens were accepted); DRF-style
  errors `{"detail": "..."}`: 401 "Authentication credentials were not provided." without a token,
  401 "Invalid token." for an unknown one, 403 for another organization, 404 "Not found.";
- GET/POST `orgs/{org}/clusters/{c}/nodepools`, GET/POST `.../nodepools/{pk}` (autoscale settings),
  POST `.../nodepools/{pk}/add` (201, the new nodes in `draft`, `group_name`
  `autoscaling-<pool instance_id>`, the pool's `node_count` raised), POST `.../add_node` (201;
  `node_pool` or gen 1's `group`, else the default pool), GET `.../nodes` (transitioning or running
  nodes), GET/DELETE `.../nodes/{pk}` (204; 404 once gone), GET `.../nodes/{pk}/can_delete`
  (400 for the initial master), GET `orgs`, `orgs/{org}/clusters[/{c}]`,
  `meta/provider-instances?provider=`; bare JSON arrays, no pagination;
- node states on the (injectable) clock: `draft` -> `building` -> `provisioned` -> `running`
  (durations configurable; the API exposed no timings, §C.6), and `deleting` -> gone; the
  provider's instance id and private IP appear when the node starts `building`;
- injectable failures: the next N new nodes fail (`state: failed`, `is_failed: true`) or stay in
  `draft` forever; an optional node limit per cluster refusing adds with 400; the shared faults
  (5xx before/after processing, 429, slow answers, dropped connections) and request log.

The pool JSON has no `cpu`/`memory` by default (as documented); `pool_cpu_memory` adds them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, HttpProblem, Request, Response
from cloudprovider_grpc.emulators.spc import seed
from cloudprovider_grpc.formats.spc_machine_specs import spec_of

NOT_AUTHENTICATED = "Authentication credentials were not provided."
INVALID_TOKEN = "Invalid token."
FORBIDDEN = "You do not have permission to perform this action."
NOT_FOUND = "Not found."
#: stackpoint-api-docs `_nodes.md`, "Check Node Delete Eligibility"
INITIAL_MASTER = "Initial master node is essential to the cluster and can't be removed."


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class SpcEmulator(EmulatorServer):
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

        c = "/orgs/{org}/clusters/{cid}"
        self.route("GET", "/orgs", self._list_orgs)
        self.route("GET", "/orgs/{org}", self._get_org)
        self.route("GET", "/orgs/{org}/clusters", self._list_clusters)
        self.route("GET", c, self._get_cluster)
        self.route("GET", f"{c}/nodepools", self._list_pools)
        self.route("POST", f"{c}/nodepools", self._create_pool)
        self.route("GET", f"{c}/nodepools/{{pool}}", self._get_pool)
        self.route("POST", f"{c}/nodepools/{{pool}}", self._update_pool)
        self.route("POST", f"{c}/nodepools/{{pool}}/add", self._add_to_pool)
        self.route("POST", f"{c}/add_node", self._add_node)
        self.route("GET", f"{c}/nodes", self._list_nodes)
        self.route("GET", f"{c}/nodes/{{node}}", self._get_node)
        self.route("DELETE", f"{c}/nodes/{{node}}", self._delete_node)
        self.route("GET", f"{c}/nodes/{{node}}/can_delete", self._can_delete)
        self.route("GET", "/meta/provider-instances", self._provider_instances)

    # ------------------------------------------------------------------ seeding
    def add_token(self, token: str, *orgs: int) -> None:
        with self.lock:
            self.tokens.setdefault(token, set()).update(orgs)

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
                "created": _iso(self.clock()),
                "updated": _iso(self.clock()),
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

    def pool_nodes(self, pool_pk: int) -> list[dict[str, Any]]:
        return [n for n in self.node_records() if n["pool"] == pool_pk]

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

    # ------------------------------------------------------------------ auth and lookups
    def error_body(self, status: int, message: str) -> Any:
        return {"detail": message}

    def authenticate(self, request: Request) -> set[int] | None:
        if request.path.startswith("/meta/"):
            return None
        header = request.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if not header.strip():
            raise HttpProblem(401, NOT_AUTHENTICATED)
        orgs = self.tokens.get(token.strip()) if scheme.lower() in ("bearer", "token") else None
        if orgs is None:
            raise HttpProblem(401, INVALID_TOKEN)
        return orgs

    def _org(self, req: Request) -> int:
        try:
            org = int(req.params["org"])
        except ValueError:
            raise HttpProblem(404, NOT_FOUND) from None
        if org not in self.orgs:
            raise HttpProblem(404, NOT_FOUND)
        if org not in req.principal:
            raise HttpProblem(403, FORBIDDEN)
        return org

    def _cluster(self, req: Request) -> dict[str, Any]:
        org = self._org(req)
        try:
            cluster = self.clusters.get(int(req.params["cid"]))
        except ValueError:
            cluster = None
        if cluster is None or cluster["org"] != org:
            raise HttpProblem(404, NOT_FOUND)
        return cluster

    def _pool(self, req: Request, cluster: Mapping[str, Any]) -> dict[str, Any]:
        try:
            pool = self.pools.get(int(req.params["pool"]))
        except ValueError:
            pool = None
        if pool is None or pool["cluster"] != cluster["pk"] or pool["state"] == "deleted":
            raise HttpProblem(404, NOT_FOUND)
        return pool

    def _node(self, req: Request, cluster: Mapping[str, Any]) -> dict[str, Any]:
        self._purge()
        try:
            node = self.nodes.get(int(req.params["node"]))
        except ValueError:
            node = None
        if node is None or node["cluster"] != cluster["pk"]:
            raise HttpProblem(404, NOT_FOUND)
        return node

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
            pool["updated"] = _iso(now)
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
                "created": _iso(node["_created"]),
                "updated": _iso(max(node["_created"], node["_deleting_at"] or 0.0)),
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

    # ------------------------------------------------------------------ handlers
    def _list_orgs(self, req: Request) -> Response:
        return Response(200, [self.orgs[o] for o in sorted(req.principal) if o in self.orgs])

    def _get_org(self, req: Request) -> Response:
        return Response(200, self.orgs[self._org(req)])

    def _cluster_json(self, c: Mapping[str, Any]) -> dict[str, Any]:
        self._purge()
        out = {k: v for k, v in c.items() if not k.startswith("_")}
        out["created"] = _iso(c["created"])
        out["node_count"] = sum(1 for n in self.nodes.values() if n["cluster"] == c["pk"])
        return out

    def _list_clusters(self, req: Request) -> Response:
        org = self._org(req)
        return Response(
            200, [self._cluster_json(c) for _, c in sorted(self.clusters.items()) if c["org"] == org]
        )

    def _get_cluster(self, req: Request) -> Response:
        return Response(200, self._cluster_json(self._cluster(req)))

    def _list_pools(self, req: Request) -> Response:
        cluster = self._cluster(req)
        return Response(
            200,
            [
                self._pool_json(p)
                for _, p in sorted(self.pools.items())
                if p["cluster"] == cluster["pk"] and p["state"] != "deleted"
            ],
        )

    def _get_pool(self, req: Request) -> Response:
        return Response(200, self._pool_json(self._pool(req, self._cluster(req))))

    @staticmethod
    def _body(req: Request) -> dict[str, Any]:
        body = req.json()
        if not isinstance(body, dict):
            raise HttpProblem(400, "JSON parse error - request body must be an object")
        return body

    @staticmethod
    def _count(body: Mapping[str, Any], key: str) -> int:
        value = body.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise HttpProblem(400, f"{key}: A valid integer is required.")
        return value

    def _create_pool(self, req: Request) -> Response:
        cluster = self._cluster(req)
        body = self._body(req)
        size = str(body.get("instance_size") or "")
        if not size:
            raise HttpProblem(400, "instance_size: This field is required.")
        count = self._count(body, "node_count") if "node_count" in body else 0
        pool = self.add_pool(
            cluster["pk"],
            name=str(body.get("name") or f"Pool {self.next_pool_pk}"),
            size=size,
            min_count=int(body.get("min_count") or 0),
            max_count=int(body.get("max_count") or 0),
            autoscaled=bool(body.get("autoscaled")),
            labels=str(body.get("labels") or ""),
        )
        for _ in range(count):
            self._new_node(cluster, pool, size)
        return Response(202, self._pool_json(pool))

    def _update_pool(self, req: Request) -> Response:
        """POST `nodepools/{pk}` with `autoscaled`, `min_count`, `max_count` (S4)."""
        cluster = self._cluster(req)
        pool = self._pool(req, cluster)
        body = self._body(req)
        autoscaled = bool(body.get("autoscaled", pool["autoscaled"]))
        lo = self._count(body, "min_count") if "min_count" in body else pool["min_count"]
        hi = self._count(body, "max_count") if "max_count" in body else pool["max_count"]
        if autoscaled and not 0 <= lo <= hi:
            raise HttpProblem(400, "min_count must be between 0 and max_count.")
        pool.update(
            autoscaled=autoscaled, min_count=lo if autoscaled else 0, max_count=hi if autoscaled else 0
        )
        pool["updated"] = _iso(self.clock())
        return Response(200, self._pool_json(pool))

    def _add(self, cluster: dict[str, Any], pool: dict[str, Any], body: Mapping[str, Any]) -> Response:
        count = self._count(body, "node_count")
        if count <= 0:
            raise HttpProblem(400, "node_count: Ensure this value is greater than or equal to 1.")
        size = str(body.get("size") or "")
        if not size:
            raise HttpProblem(400, "size: This field is required.")
        if size != pool["instance_size"]:
            raise HttpProblem(
                400, f"size {size!r} does not match the node pool's instance size {pool['instance_size']!r}."
            )
        if self.node_limit is not None:
            used = sum(
                1 for n in self.nodes.values() if n["cluster"] == cluster["pk"] and n["_deleting_at"] is None
            )
            if used + count > self.node_limit:
                raise HttpProblem(
                    400,
                    f"InstanceLimitExceeded: the provider allows {self.node_limit} nodes "
                    f"in this cluster ({used} used).",
                )
        capacity = pool.get("_capacity")
        if capacity is not None:
            held = sum(
                1 for n in self.nodes.values() if n["pool"] == pool["pk"] and n["_deleting_at"] is None
            )
            if held + count > capacity:
                raise HttpProblem(
                    400,
                    f"InsufficientInstanceCapacity: the provider has no capacity for {count} more "
                    f"{size} node(s) in {pool['zone']}.",
                )
        created = [self._new_node(cluster, pool, size) for _ in range(count)]
        return Response(201, [self._node_json(n) for n in created])

    def _add_to_pool(self, req: Request) -> Response:
        cluster = self._cluster(req)
        pool = self._pool(req, cluster)
        body = self._body(req)
        if body.get("node_pool") not in (None, pool["pk"]):
            raise HttpProblem(400, "node_pool does not match the node pool in the path.")
        return self._add(cluster, pool, body)

    def _add_node(self, req: Request) -> Response:
        """POST `add_node`: `node_pool` (gen 2 interim) or `group` (gen 1), else the default pool."""
        cluster = self._cluster(req)
        body = self._body(req)
        pools = [p for p in self.pools.values() if p["cluster"] == cluster["pk"] and p["state"] != "deleted"]
        if body.get("node_pool") is not None:
            pool = next((p for p in pools if p["pk"] == body["node_pool"]), None)
        elif body.get("group"):
            pool = next((p for p in pools if f"autoscaling-{p['instance_id']}" == body["group"]), None)
        else:
            pool = next((p for p in pools if p["is_default"]), None)
        if pool is None:
            raise HttpProblem(400, "node_pool: Invalid pk - object does not exist.")
        return self._add(cluster, pool, body)

    def _list_nodes(self, req: Request) -> Response:
        cluster = self._cluster(req)
        self._purge()
        return Response(
            200, [self._node_json(n) for _, n in sorted(self.nodes.items()) if n["cluster"] == cluster["pk"]]
        )

    def _get_node(self, req: Request) -> Response:
        cluster = self._cluster(req)
        return Response(200, self._node_json(self._node(req, cluster)))

    def _can_delete(self, req: Request) -> Response:
        cluster = self._cluster(req)
        node = self._node(req, cluster)
        if node["_initial"]:
            raise HttpProblem(400, INITIAL_MASTER)
        return Response(200, {"eligible": True})

    def _delete_node(self, req: Request) -> Response:
        cluster = self._cluster(req)
        node = self._node(req, cluster)
        if node["_initial"]:
            raise HttpProblem(400, INITIAL_MASTER)  # reconstruction: DELETE refuses what can_delete refuses
        if node["_deleting_at"] is None:
            node["_deleting_at"] = self.clock()
            pool = self.pools.get(node["pool"]) if node["pool"] is not None else None
            if pool is not None:
                pool["node_count"] = max(0, pool["node_count"] - 1)
                pool["updated"] = _iso(self.clock())
            if self.deleting_seconds <= 0:
                del self.nodes[node["pk"]]
        return Response(204)

    def _provider_instances(self, req: Request) -> Response:
        provider = req.arg("provider") or ""
        if not provider:
            raise HttpProblem(400, "provider: This query parameter is required.")
        return Response(200, seed.provider_instances(provider))
