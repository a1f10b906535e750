"""A StackPointCloud API emulator served over real HTTP, shipped with the product.

SPC was shut down around 2020, so this is a reconstruction of exactly the surface the fork and the
SDKs used (StackPointCloud/stackpoint-sdk-go `pkg/stackpointio/client.go` at b87d5ae via the
justinhopper fork, NetApp/nks-sdk-go `nks/`, and the API docs StackPointCloud/stackpoint-api-docs
`source/includes/` at f612c5f), faithful where a source documents it:

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
The cloud's state and state machine are in state.py; this module is the HTTP side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudprovider_grpc.emulators import HttpProblem, Request, Response
from cloudprovider_grpc.emulators.spc import seed
from cloudprovider_grpc.emulators.spc.state import SpcCloud, iso_time

NOT_AUTHENTICATED = "Authentication credentials were not provided."
INVALID_TOKEN = "Invalid token."
FORBIDDEN = "You do not have permission to perform this action."
NOT_FOUND = "Not found."
#: stackpoint-api-docs `_nodes.md`, "Check Node Delete Eligibility"
INITIAL_MASTER = "Initial master node is essential to the cluster and can't be removed."


class SpcEmulator(SpcCloud):
    """The API over HTTP: Bearer tokens, DRF errors and the handlers, on the cloud of state.py."""

    def _add_routes(self) -> None:
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

    # ------------------------------------------------------------------ handlers
    def _list_orgs(self, req: Request) -> Response:
        return Response(200, [self.orgs[o] for o in sorted(req.principal) if o in self.orgs])

    def _get_org(self, req: Request) -> Response:
        return Response(200, self.orgs[self._org(req)])

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
        pool["updated"] = iso_time(self.clock())
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
                pool["updated"] = iso_time(self.clock())
            if self.deleting_seconds <= 0:
                del self.nodes[node["pk"]]
        return Response(204)

    def _provider_instances(self, req: Request) -> Response:
        provider = req.arg("provider") or ""
        if not provider:
            raise HttpProblem(400, "provider: This query parameter is required.")
        return Response(200, seed.provider_instances(provider))
