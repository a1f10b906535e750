"""A Vultr API v2 emulator for VKE node pools, served over real HTTP, shipped with the product.

What it reproduces (govultr kubernetes.go and its test
fixtures; the API v2 introduction):
- routes under `/v2/`: GET `kubernetes/clusters/{id}` (`vke_cluster` with embedded `node_pools`),
  GET `.../node-pools` (`node_pools` + `meta`), GET and PATCH `.../node-pools/{pool}` (`node_pool`;
  PATCH answers 202), DELETE `.../node-pools/{pool}/nodes/{node}` (204), POST
  `.../nodes/{node}/recycle` (204), GET `plans` (`plans` + `meta`, `type` filter);
- `Authorization: Bearer <key>`; anything else is 401 `{"error": "Invalid API token.", "status": 401}`,
  except on GET `plans`, which is public;
  every error body is `{"error": "...", "status": N}`;
- cursor pagination: `per_page` (default `page_size`, small on purpose so clients follow cursors),
  `cursor` opaque, `meta.total`, `meta.links.next`/`prev` "" at the ends;
- 30 requests/s per client address, then 429 (the base's token bucket);
- node `status` `pending` -> `active` after `provision_seconds` on the emulator's clock; a pool is
  `pending` while any of its nodes is;
- PATCH `node_quantity` up adds `pending` nodes; PATCH down deletes **random** nodes (the in-tree
  README's warning about VKE); DELETE of a node lowers `node_quantity` by one (inferred from the
  in-tree provider's decrement, not documented); `node_quantity` below 1 is refused with 400, and so is
  the deletion of a pool's last node; recycle replaces a node's id and keeps the quantity;
- an account-wide `node_limit` (PATCH beyond it: 400, a quota refusal), a per-plan `stock` (new nodes
  of a plan the location can still provide; a PATCH growing a pool beyond it: 400, a capacity
  refusal; nodes deleted give their capacity back) and `stale_echoes` (the next N PATCHes are applied
  but echo the old `node_quantity`), plus the base's switchable faults.
Undocumented details (the quota and sold-out wording, that a sold-out plan refuses the PATCH rather
than leaving nodes pending, whether PATCH enforces `min_nodes`/`max_nodes`: off by default,
`enforce_bounds` turns it on) are our reconstruction. That a location runs out of a plan is
documented by Vultr staff ("If the host node is out of capacity, no one will be able to deploy large
instances there ... regardless of how the deployment is attempted (... Vultr API ...)",
vultr/whmcs-vultr#74) and by users ("temporarily sold-out", joedicastro/vps-comparison#27).
"""

from __future__ import annotations

import base64
import binascii
import copy
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, HttpProblem, Request, Response
from cloudprovider_grpc.emulators.vultr import seed as emulator_seed
from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool

#: most objects one page may hold (per_page above it is capped, as list APIs do)
MAX_PER_PAGE = 500


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class VultrEmulator(EmulatorServer):
    name = "vultr"
    prefix = "/v2/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tokens: Iterable[str] = (),
        provision_seconds: float = 5.0,
        page_size: int = 100,
        node_limit: int | None = None,
        stock: Mapping[str, int] | None = None,
        enforce_bounds: bool = False,
        plans: list[dict[str, Any]] | None = None,
        seed: int = 0,
        clock: Clock | Callable[[], float] | None = None,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = 30.0,
        state_file: Path | None = None,
    ) -> None:
        super().__init__(
            host, port, clock=clock, faults=faults, rate_limit_per_s=rate_limit_per_s, state_file=state_file
        )
        self.tokens: set[str] = set(tokens)
        self.provision_seconds = provision_seconds
        self.page_size = page_size
        self.node_limit = node_limit
        #: plan id -> new nodes of that plan the location can still provide (plans not named: no limit)
        self.stock: dict[str, int] = dict(stock or {})
        self.enforce_bounds = enforce_bounds
        self.plans = copy.deepcopy(plans or emulator_seed.PLANS)
        self.rng = random.Random(seed)
        #: cluster id -> {id, label, region, version, status, date_created, pools: [pool ids]}
        self.clusters: dict[str, dict[str, Any]] = {}
        #: pool id -> pool record (`cluster`, `nodes` with `created` times)
        self.pools: dict[str, dict[str, Any]] = {}
        #: the next N PATCHes are applied but echo the previous node_quantity
        self.stale_echoes = 0
        #: every PATCH that reached a pool: (pool id, node_quantity asked or None), in order
        self.patches: list[tuple[str, int | None]] = []
        #: nodes VKE chose to delete itself because a PATCH lowered node_quantity below the node
        #: count: (pool id, node ids); a client that never lowers a size blindly leaves this empty
        self.random_deletions: list[tuple[str, list[str]]] = []

        c = "/v2/kubernetes/clusters/{cid}"
        self.route("GET", c, self._get_cluster)
        self.route("GET", f"{c}/node-pools", self._list_pools)
        self.route("GET", f"{c}/node-pools/{{pid}}", self._get_pool)
        self.route("PATCH", f"{c}/node-pools/{{pid}}", self._patch_pool)
        self.route("DELETE", f"{c}/node-pools/{{pid}}/nodes/{{nid}}", self._delete_node)
        self.route("POST", f"{c}/node-pools/{{pid}}/nodes/{{nid}}/recycle", self._recycle_node)
        self.route("GET", "/v2/plans", self._list_plans)

    # ------------------------------------------------------------------ seeding and inspection
    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def add_cluster(
        self,
        cluster_id: str,
        pools: Sequence[EmulatorPool] = emulator_seed.DEMO_POOLS,
        *,
        region: str = "ewr",
        label: str = "vke-demo",
    ) -> list[str]:
        """Create a cluster with these pools (all nodes `active` at once); return the pool ids."""
        with self.lock:
            now = self.clock()
            self.clusters[cluster_id] = {
                "id": cluster_id,
                "label": label,
                "region": region,
                "version": "v1.33.2+1",
                "status": "active",
                "date_created": _iso(now),
                "pools": [],
            }
            return [self.add_pool(cluster_id, p, ready=True) for p in pools]

    def add_pool(self, cluster_id: str, spec: EmulatorPool, *, ready: bool = False) -> str:
        with self.lock:
            now = self.clock()
            pid = spec.id or self._uuid()
            if pid in self.pools:
                raise ValueError(f"node pool id {pid} is already taken")
            self.pools[pid] = {
                "id": pid,
                "cluster": cluster_id,
                "label": spec.label,
                "plan": spec.plan,
                "tag": "",
                "node_quantity": 0,
                "min_nodes": spec.min_nodes,
                "max_nodes": spec.max_nodes,
                "auto_scaler": spec.auto_scaler,
                "labels": dict(spec.labels),
                "taints": [dict(t) for t in spec.taints],
                "created": now,
                "updated": now,
                "nodes": [],
            }
            self.clusters[cluster_id]["pools"].append(pid)
            self._grow(self.pools[pid], spec.node_quantity, ready=ready)
            return pid

    def _grow(self, pool: dict[str, Any], count: int, *, ready: bool = False) -> None:
        created = self.clock() - (self.provision_seconds if ready else 0.0)
        for _ in range(count):
            pool["nodes"].append(
                {
                    "id": self._uuid(),
                    "label": f"{pool['label']}-{self.rng.getrandbits(52):013x}",
                    "created": created,
                    "ip": f"10.1.{self.rng.randrange(256)}.{self.rng.randrange(1, 255)}",
                }
            )
        pool["node_quantity"] += count

    def pool_id(self, label: str) -> str:
        with self.lock:
            return next(pid for pid, p in self.pools.items() if p["label"] == label)

    def pool_record(self, pool_id: str) -> dict[str, Any]:
        """A pool as the API would show it now (with node statuses)."""
        with self.lock:
            return self._pool_json(self.pools[pool_id])

    def node_ids(self, pool_id: str) -> list[str]:
        with self.lock:
            return [n["id"] for n in self.pools[pool_id]["nodes"]]

    def total_nodes(self) -> int:
        with self.lock:
            return sum(len(p["nodes"]) for p in self.pools.values())

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "clusters": self.clusters,
            "pools": self.pools,
            "tokens": sorted(self.tokens),
            "stock": self.stock,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.clusters = {str(k): dict(v) for k, v in data.get("clusters", {}).items()}
        self.pools = {str(k): dict(v) for k, v in data.get("pools", {}).items()}
        self.tokens.update(str(t) for t in data.get("tokens", []))
        self.stock.update({str(k): int(v) for k, v in data.get("stock", {}).items()})

    # ------------------------------------------------------------------ auth, errors, rendering
    def authenticate(self, request: Request) -> str:
        if request.method == "GET" and request.path.rstrip("/") == "/v2/plans":
            # a public endpoint: the API v2 reference lists plans without a security requirement
            return ""
        header = request.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or token not in self.tokens:
            raise HttpProblem(401, "Invalid API token.")  # wording seen in public fixtures (libcloud)
        return token

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message, "status": status}

    def _node_status(self, node: Mapping[str, Any]) -> str:
        return "active" if self.clock() - node["created"] >= self.provision_seconds else "pending"

    def _pool_json(self, p: Mapping[str, Any]) -> dict[str, Any]:
        nodes = [
            {
                "id": n["id"],
                "label": n["label"],
                "date_created": _iso(n["created"]),
                "status": self._node_status(n),
                "ip": n["ip"],
            }
            for n in p["nodes"]
        ]
        return {
            "id": p["id"],
            "date_created": _iso(p["created"]),
            "date_updated": _iso(p["updated"]),
            "label": p["label"],
            "plan": p["plan"],
            "status": "pending" if any(n["status"] == "pending" for n in nodes) else "active",
            "node_quantity": p["node_quantity"],
            "min_nodes": p["min_nodes"],
            "max_nodes": p["max_nodes"],
            "auto_scaler": p["auto_scaler"],
            "tag": p["tag"],
            "labels": dict(p["labels"]),
            "taints": [dict(t) for t in p["taints"]],
            "user_data": "",
            "nodes": nodes,
        }

    def _cluster(self, req: Request) -> dict[str, Any]:
        cluster = self.clusters.get(req.params["cid"])
        if cluster is None:
            raise HttpProblem(404, "Kubernetes cluster not found.")
        return cluster

    def _pool(self, req: Request) -> dict[str, Any]:
        cluster = self._cluster(req)
        pool = self.pools.get(req.params["pid"])
        if pool is None or pool["cluster"] != cluster["id"]:
            raise HttpProblem(404, "Node pool not found.")
        return pool

    def _page(self, req: Request, items: list[Any], key: str) -> Response:
        raw = req.arg("per_page")
        if raw is None:
            per_page = self.page_size
        else:
            try:
                per_page = int(raw)
            except ValueError:
                raise HttpProblem(400, "per_page must be an integer") from None
            if per_page < 1:
                raise HttpProblem(400, "per_page must be at least 1")
        per_page = min(per_page, MAX_PER_PAGE)
        offset = _decode_cursor(req.arg("cursor") or "")
        page = items[offset : offset + per_page]
        nxt = offset + per_page
        links = {
            "next": _encode_cursor(nxt) if nxt < len(items) else "",
            "prev": _encode_cursor(max(0, offset - per_page)) if offset > 0 else "",
        }
        return Response(200, {key: page, "meta": {"total": len(items), "links": links}})

    # ------------------------------------------------------------------ handlers
    def _get_cluster(self, req: Request) -> Response:
        cluster = self._cluster(req)
        pools = [self._pool_json(self.pools[pid]) for pid in cluster["pools"]]
        body = {k: v for k, v in cluster.items() if k != "pools"}
        body.update(
            {"cluster_subnet": "10.244.0.0/16", "service_subnet": "10.96.0.0/12", "node_pools": pools}
        )
        return Response(200, {"vke_cluster": body})

    def _list_pools(self, req: Request) -> Response:
        cluster = self._cluster(req)
        return self._page(req, [self._pool_json(self.pools[pid]) for pid in cluster["pools"]], "node_pools")

    def _get_pool(self, req: Request) -> Response:
        return Response(200, {"node_pool": self._pool_json(self._pool(req))})

    def _patch_pool(self, req: Request) -> Response:
        pool = self._pool(req)
        body = req.json()
        if not isinstance(body, dict):
            raise HttpProblem(400, "Invalid request body.")
        for key in ("min_nodes", "max_nodes"):
            if key in body:
                if not _is_int(body[key]) or body[key] < 0:
                    raise HttpProblem(400, f"Invalid {key}.")
                pool[key] = body[key]
        if "auto_scaler" in body:
            if not isinstance(body["auto_scaler"], bool):
                raise HttpProblem(400, "Invalid auto_scaler.")
            pool["auto_scaler"] = body["auto_scaler"]
        if isinstance(body.get("tag"), str):
            pool["tag"] = body["tag"]
        self.patches.append(
            (pool["id"], body.get("node_quantity") if _is_int(body.get("node_quantity")) else None)
        )
        old = pool["node_quantity"]
        if "node_quantity" in body:
            want = body["node_quantity"]
            if not _is_int(want):
                raise HttpProblem(400, "Invalid node_quantity.")
            if want < 1:
                raise HttpProblem(400, "node_quantity must be at least 1.")
            if (
                self.enforce_bounds
                and pool["auto_scaler"]
                and not pool["min_nodes"] <= want <= pool["max_nodes"]
            ):
                raise HttpProblem(
                    400, f"node_quantity must be between {pool['min_nodes']} and {pool['max_nodes']}."
                )
            if want > old and self.node_limit is not None:
                total = sum(len(p["nodes"]) for p in self.pools.values())
                if total + want - old > self.node_limit:
                    raise HttpProblem(
                        400,
                        f"Unable to scale node pool: the account instance limit of {self.node_limit} "
                        "would be exceeded (quota).",
                    )
            if want > old:
                self._take_stock(pool, want - old)
                self._grow(pool, want - old)
            elif want < old:
                # what VKE does on a decrease: it picks the nodes itself, at random
                victims = self.rng.sample(pool["nodes"], old - want)
                for node in victims:
                    pool["nodes"].remove(node)
                self._return_stock(pool, len(victims))
                self.random_deletions.append((pool["id"], [n["id"] for n in victims]))
                pool["node_quantity"] = want
        pool["updated"] = self.clock()
        echoed = self._pool_json(pool)
        if self.stale_echoes > 0:
            self.stale_echoes -= 1
            echoed["node_quantity"] = old
        return Response(202, {"node_pool": echoed})

    def _take_stock(self, pool: Mapping[str, Any], count: int) -> None:
        """Refuse growth the location cannot provide (the pool is left as it was)."""
        plan = pool["plan"]
        left = self.stock.get(plan)
        if left is None:
            return
        if count > left:
            region = self.clusters[pool["cluster"]]["region"]
            raise HttpProblem(
                400,
                f"Unable to scale node pool: plan {plan} is temporarily sold out in {region} "
                f"(not enough capacity for {count} more node(s)).",
            )
        self.stock[plan] = left - count

    def _return_stock(self, pool: Mapping[str, Any], count: int) -> None:
        if pool["plan"] in self.stock:
            self.stock[pool["plan"]] += count

    def _node(self, req: Request) -> tuple[dict[str, Any], dict[str, Any]]:
        pool = self._pool(req)
        node = next((n for n in pool["nodes"] if n["id"] == req.params["nid"]), None)
        if node is None:
            raise HttpProblem(404, "Node not found.")
        return pool, node

    def _delete_node(self, req: Request) -> Response:
        pool, node = self._node(req)
        if len(pool["nodes"]) <= 1:
            raise HttpProblem(400, "Unable to delete the last node of a node pool.")
        pool["nodes"].remove(node)
        self._return_stock(pool, 1)
        pool["node_quantity"] = max(1, pool["node_quantity"] - 1)
        pool["updated"] = self.clock()
        return Response(204, headers={"Content-Type": None})

    def _recycle_node(self, req: Request) -> Response:
        pool, node = self._node(req)
        node.update(id=self._uuid(), created=self.clock())
        pool["updated"] = self.clock()
        return Response(204, headers={"Content-Type": None})

    def _list_plans(self, req: Request) -> Response:
        kind = req.arg("type") or "all"
        plans = [p for p in self.plans if kind == "all" or p.get("type") == kind]
        return self._page(req, copy.deepcopy(plans), "plans")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"next__{offset}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        return max(0, int(text.removeprefix("next__")))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise HttpProblem(400, "Invalid cursor.") from None
