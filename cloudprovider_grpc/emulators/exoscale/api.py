"""The Exoscale emulator's API: operations and the route handlers."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from cloudprovider_grpc.emulators import HttpProblem, Request, Response
from cloudprovider_grpc.emulators.exoscale.core import check_uuid
from cloudprovider_grpc.emulators.exoscale.gateway import ExoscaleGateway


class ExoscaleApi(ExoscaleGateway):
    """Operations and the handlers of every route."""

    def _add_routes(self) -> None:
        v = self.prefix.rstrip("/")
        for method, pattern, op, handler in (
            ("GET", "sks-cluster", "list-sks-clusters", self._list_clusters),
            ("GET", "sks-cluster/{id}", "get-sks-cluster", self._get_cluster),
            ("GET", "sks-cluster/{id}/nodepool/{np}", "get-sks-nodepool", self._get_nodepool),
            ("PUT", "sks-cluster/{id}/nodepool/{np}:scale", "scale-sks-nodepool", self._scale_nodepool),
            (
                "PUT",
                "sks-cluster/{id}/nodepool/{np}:evict",
                "evict-sks-nodepool-members",
                self._evict_nodepool,
            ),
            ("GET", "instance-pool", "list-instance-pools", self._list_pools),
            ("GET", "instance-pool/{id}", "get-instance-pool", self._get_pool),
            ("PUT", "instance-pool/{id}:scale", "scale-instance-pool", self._scale_pool),
            ("PUT", "instance-pool/{id}:evict", "evict-instance-pool-members", self._evict_pool),
            ("GET", "instance", "list-instances", self._list_instances),
            ("GET", "instance/{id}", "get-instance", self._get_instance),
            ("GET", "instance-type", "list-instance-types", self._list_types),
            ("GET", "instance-type/{id}", "get-instance-type", self._get_type),
            ("GET", "quota", "list-quotas", self._list_quotas),
            ("GET", "quota/{entity}", "get-quota", self._get_quota),
            ("GET", "operation/{id}", "get-operation", self._get_operation),
        ):
            self.route(method, f"{v}/{pattern}", self._iam(op, handler))
            regex = re.sub(r"\\\{[a-z]+\\\}", "[^/:]+", re.escape(f"{v}/{pattern}"))
            self._operation_routes.append((method, re.compile(f"^{regex}/?$"), op))

    # ------------------------------------------------------------------ operations
    def _operation(self, ref_kind: str, ref_id: str, outcome: tuple[str, str, str] | None) -> Response:
        oid = self._uuid()
        now = self.clock()
        state, reason, message = outcome or ("success", "", "")
        self.operations[oid] = {
            "id": oid,
            "state": "pending",
            "final": state,
            "reason": reason,
            "message": message,
            "created": now,
            "hold_until": now + self.hold_operations,
            "polls": 0,
            "reference": {"id": ref_id, "link": f"/v2/{ref_kind}/{ref_id}", "command": f"get-{ref_kind}"},
        }
        return Response(200, self._operation_json(self.operations[oid]))

    def _get_operation(self, req: Request) -> Response:
        oid = check_uuid(req.params["id"], "operation id")
        op = self.operations.get(oid)
        if op is None:
            raise HttpProblem(404, f"operation {oid} not found")
        if op["state"] == "pending":
            op["polls"] += 1
            now = self.clock()
            if (
                op["polls"] >= self.operation_polls
                and now - op["created"] >= self.operation_seconds
                and now >= op["hold_until"]
            ):
                op["state"] = op["final"]
        return Response(200, self._operation_json(op))

    def _outcome(self, pool: Mapping[str, Any], grow: int) -> tuple[str, str, str] | None:
        """What the change will end as: an injected failure, a conflict, a quota refusal, or None."""
        if self.fail_next:
            return self.fail_next.pop(0)
        if self.conflict_mode == "reject" and self._pool_state(pool) != "running":
            return ("failure", "conflict", f"Instance Pool {pool['id']} is busy ({self._pool_state(pool)})")
        if grow > 0 and self.quota_limit >= 0 and self.usage() + grow > self.quota_limit:
            message = (
                f"Quota exceeded for resource instance: limit {self.quota_limit}, "
                f"usage {self.usage()}, requested {grow}"
            )
            if self.quota_mode == "reject":
                raise HttpProblem(400, message)
            return ("failure", "forbidden", message)
        left = self.stock.get(pool["type"])
        if grow > 0 and left is not None and grow > left:
            itype = next(t for t in self.instance_types if t["id"] == pool["type"])
            return (
                "failure",
                "unavailable",
                f"Not enough capacity for instance type {itype['family']}.{itype['size']} in zone "
                f"{self.zone}: {left} left, {grow} requested",
            )
        return None

    def _scale(self, req: Request, pool: dict[str, Any], ref_kind: str, ref_id: str) -> Response:
        body = req.json()
        size = body.get("size") if isinstance(body, dict) else None
        if isinstance(size, bool) or not isinstance(size, int):
            raise HttpProblem(400, "invalid request body: size is required and must be an integer")
        if size < 0:
            raise HttpProblem(400, "invalid request body: size must be at least 0")
        if size == 0 and not pool.get("manager"):
            # the OpenAPI `instance-pool` schema makes a standalone pool's size strictly positive
            # (a nodepool's may be 0): such a pool cannot be scaled to zero
            raise HttpProblem(400, "invalid request: an Instance Pool size must be at least 1")
        outcome = self._outcome(pool, size - pool["size"])
        if outcome is None:
            if size > pool["size"]:
                if pool["type"] in self.stock:
                    self.stock[pool["type"]] -= size - pool["size"]
                self._grow(pool, size - pool["size"])
            elif size < pool["size"]:
                # the API picks which members go; the newest first here
                self._shrink(pool, pool["instances"][size:][::-1])
        return self._operation(ref_kind, ref_id, outcome)

    def _evict(self, req: Request, pool: dict[str, Any], ref_kind: str, ref_id: str) -> Response:
        body = req.json()
        ids = body.get("instances") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise HttpProblem(400, "invalid request body: instances must be a non-empty list of instance IDs")
        if len(set(ids)) != len(ids):
            raise HttpProblem(400, "invalid request body: instances must be unique")
        for iid in ids:
            check_uuid(iid, "instance id")
            if iid not in pool["instances"]:
                raise HttpProblem(400, f"instance {iid} is not a member of Instance Pool {pool['id']}")
        if not pool.get("manager") and len(ids) >= pool["size"]:
            raise HttpProblem(
                400, "invalid request: evicting every member would leave the Instance Pool empty"
            )
        outcome = self._outcome(pool, 0)
        if outcome is None:
            self._shrink(pool, ids)
        return self._operation(ref_kind, ref_id, outcome)

    # ------------------------------------------------------------------ handlers
    def _cluster(self, req: Request) -> dict[str, Any]:
        cid = check_uuid(req.params["id"], "SKS cluster id")
        if cid not in self.clusters:
            raise HttpProblem(404, f"SKS cluster {cid} not found")
        return self.clusters[cid]

    def _nodepool(self, req: Request) -> dict[str, Any]:
        cluster = self._cluster(req)
        npid = check_uuid(req.params["np"], "SKS nodepool id")
        if npid not in cluster["nodepools"]:
            raise HttpProblem(404, f"SKS nodepool {npid} not found")
        return self.nodepools[npid]

    def _pool(self, req: Request) -> dict[str, Any]:
        pid = check_uuid(req.params["id"], "Instance Pool id")
        if pid not in self.pools:
            raise HttpProblem(404, f"Instance Pool {pid} not found")
        return self.pools[pid]

    def _list_clusters(self, req: Request) -> Response:
        self._purge()
        return Response(200, {"sks-clusters": [self._cluster_json(c) for c in self.clusters.values()]})

    def _get_cluster(self, req: Request) -> Response:
        self._purge()
        return Response(200, self._cluster_json(self._cluster(req)))

    def _get_nodepool(self, req: Request) -> Response:
        self._purge()
        return Response(200, self._nodepool_json(self._nodepool(req)))

    def _scale_nodepool(self, req: Request) -> Response:
        np = self._nodepool(req)
        self._purge()
        return self._scale(req, self.pools[np["pool"]], "sks-cluster", np["cluster"])

    def _evict_nodepool(self, req: Request) -> Response:
        np = self._nodepool(req)
        self._purge()
        return self._evict(req, self.pools[np["pool"]], "sks-cluster", np["cluster"])

    def _list_pools(self, req: Request) -> Response:
        self._purge()
        return Response(200, {"instance-pools": [self._pool_json(p) for p in self.pools.values()]})

    def _get_pool(self, req: Request) -> Response:
        self._purge()
        return Response(200, self._pool_json(self._pool(req)))

    def _scale_pool(self, req: Request) -> Response:
        pool = self._pool(req)
        self._purge()
        return self._scale(req, pool, "instance-pool", pool["id"])

    def _evict_pool(self, req: Request) -> Response:
        pool = self._pool(req)
        self._purge()
        return self._evict(req, pool, "instance-pool", pool["id"])

    def _list_instances(self, req: Request) -> Response:
        self._purge()
        manager_type = req.arg("manager-type")
        if manager_type not in (None, "instance-pool"):
            raise HttpProblem(400, f"invalid manager-type {manager_type!r} (expected instance-pool)")
        manager_id = req.arg("manager-id")
        if manager_id is not None:
            check_uuid(manager_id, "manager-id")
            if manager_id in self.broken_pools:
                raise HttpProblem(503, f"Instance Pool {manager_id} is temporarily unavailable")
        rows = [
            self._instance_json(i)
            for i in self.instances.values()
            if manager_id is None or i["pool"] == manager_id
        ]
        return Response(200, {"instances": rows})

    def _get_instance(self, req: Request) -> Response:
        self._purge()
        iid = check_uuid(req.params["id"], "instance id")
        if iid not in self.instances:
            raise HttpProblem(404, f"instance {iid} not found")
        return Response(200, self._instance_json(self.instances[iid]))

    def _list_types(self, req: Request) -> Response:
        return Response(200, {"instance-types": copy.deepcopy(self.instance_types)})

    def _get_type(self, req: Request) -> Response:
        tid = check_uuid(req.params["id"], "instance type id")
        found = next((t for t in self.instance_types if t["id"] == tid), None)
        if found is None:
            raise HttpProblem(404, f"instance type {tid} not found")
        return Response(200, copy.deepcopy(found))

    def _quota(self) -> dict[str, Any]:
        return {"resource": "instance", "usage": self.usage(), "limit": self.quota_limit}

    def _list_quotas(self, req: Request) -> Response:
        return Response(200, {"quotas": [self._quota()]})

    def _get_quota(self, req: Request) -> Response:
        if req.params["entity"] != "instance":
            raise HttpProblem(404, f"quota {req.params['entity']} not found")
        return Response(200, self._quota())
