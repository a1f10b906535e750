"""The Exoscale emulator's core: the cloud's state (SKS clusters, nodepools, Instance Pools,
instances, operations, keys), its seeding, inspection and persistence, the state machines on an
injectable clock and the JSON rendering. Authentication and IAM are in gateway.py, the handlers in
api.py."""

from __future__ import annotations

import copy
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, HttpProblem, Request, Response
from cloudprovider_grpc.emulators.exoscale import seed

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
OPERATION_REASONS = frozenset(
    {"busy", "conflict", "fault", "forbidden", "incorrect", "interrupted", "not-found", "partial"}
    | {"unavailable", "unknown", "unsupported"}
)
Observer = Callable[[Request, Response], None]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_uuid(value: str, what: str) -> str:
    if not _UUID_RE.match(value):
        raise HttpProblem(400, f"invalid {what}: {value!r} is not a UUID")
    return value


class ExoscaleCore(EmulatorServer):
    """The emulator's state, seeding and inspection, persistence, the state machines and the JSON
    rendering; authentication and IAM live in gateway.py, the operations and handlers in api.py."""

    name = "exoscale"
    prefix = "/v2/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        zone: str = "ch-gva-2",
        keys: Mapping[str, str] | None = None,
        operations: Mapping[str, Iterable[str] | None] | None = None,
        boot_seconds: float = 5.0,
        destroy_seconds: float = 2.0,
        operation_polls: int = 1,
        operation_seconds: float = 0.0,
        quota_limit: int = 50,
        quota_mode: str = "operation",
        stock: Mapping[str, int] | None = None,
        conflict_mode: str = "accept",
        auth_failure_status: int = 403,
        seed_value: int = 0,
        clock: Clock | Callable[[], float] | None = None,
        signature_clock: Callable[[], float] = time.time,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = None,
        state_file: Path | None = None,
    ) -> None:
        super().__init__(
            host, port, clock=clock, faults=faults, rate_limit_per_s=rate_limit_per_s, state_file=state_file
        )
        self.zone = zone
        #: API key -> secret
        self.keys: dict[str, str] = dict(keys or {})
        #: API key -> allowed OperationIds (None: every operation)
        self.allowed: dict[str, frozenset[str] | None] = {
            k: (None if v is None else frozenset(v)) for k, v in (operations or {}).items()
        }
        self.boot_seconds = boot_seconds
        self.destroy_seconds = destroy_seconds
        self.operation_polls = operation_polls
        self.operation_seconds = operation_seconds
        self.quota_limit = quota_limit
        self.quota_mode = quota_mode
        self.conflict_mode = conflict_mode
        self.auth_failure_status = auth_failure_status
        self.signature_clock = signature_clock
        self._rng = random.Random(seed_value)
        self.instance_types = seed.instance_types(zone)
        #: instance-type id -> instances of it the zone can still create (types not named: no limit)
        self.stock: dict[str, int] = {self.find_type(k)["id"]: int(v) for k, v in (stock or {}).items()}
        self.clusters: dict[str, dict[str, Any]] = {}
        self.nodepools: dict[str, dict[str, Any]] = {}
        self.pools: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, dict[str, Any]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        #: outcomes (state, reason, message) the next accepted changes get instead of success
        self.fail_next: list[tuple[str, str, str]] = []
        #: operations accepted from now on stay pending at least this long (seconds)
        self.hold_operations = 0.0
        #: called with every request and its answer (tests validate both against the OpenAPI)
        self.observer: Observer | None = None
        #: the next N changes (PUT) are carried out but answered 502, as a gateway losing the answer
        self.lose_next_answers = 0
        #: pool ids whose member listing answers 503 (one broken pool beside healthy ones)
        self.broken_pools: set[str] = set()
        #: resources (SKS nodepool or Instance Pool ids) a deny rule of every key's IAM policy covers,
        #: as the IAM policy guide's `{"action": "deny", "expression": "resource.sks_nodepool.name in
        #: [...]"}` (community.exoscale.com/product/iam/how-to/policy-guide): a request naming one in
        #: its path or its `manager-id` filter answers 403; a nodepool's Instance Pool is covered with it
        self.denied_resources: set[str] = set()

        self._operation_routes: list[tuple[str, re.Pattern[str], str]] = []
        self._add_routes()

    def _add_routes(self) -> None:
        """The API's routes, each behind its IAM operation (see api.py)."""

    # ------------------------------------------------------------------ seeding and inspection
    def _uuid(self) -> str:
        """A new UUID, reproducible from the seed, never one already in use (after a restore the
        seeded sequence starts over)."""
        taken = (self.clusters, self.nodepools, self.pools, self.instances, self.operations)
        while True:
            value = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            if not any(value in d for d in taken):
                return value

    def _new_id(self, wanted: str) -> str:
        """`wanted` when given (a UUID no object has yet), else a generated one."""
        if not wanted:
            return self._uuid()
        if not _UUID_RE.match(wanted):
            raise ValueError(f"{wanted!r} is not a UUID")
        if any(wanted in d for d in (self.clusters, self.nodepools, self.pools, self.instances)):
            raise ValueError(f"id {wanted} is already taken")
        return wanted

    def add_key(self, key: str, secret: str, operations: Iterable[str] | None = None) -> None:
        with self.lock:
            self.keys[key] = secret
            self.allowed[key] = None if operations is None else frozenset(operations)

    def find_type(self, name: str) -> dict[str, Any]:
        """An instance type by id or `<family>.<size>`."""
        for t in self.instance_types:
            if name in (t["id"], f"{t['family']}.{t['size']}"):
                return t
        raise KeyError(f"no instance type {name!r}")

    def add_cluster(self, name: str) -> str:
        with self.lock:
            cid = self._uuid()
            self.clusters[cid] = {"id": cid, "name": name, "created": self.clock(), "nodepools": []}
            return cid

    def add_pool(
        self,
        name: str,
        *,
        instance_type: str = "standard.medium",
        size: int = 0,
        labels: Mapping[str, str] | None = None,
        disk_size: int = 50,
        manager: str | None = None,
        running: bool = True,
        pool_id: str = "",
    ) -> str:
        """A standalone Instance Pool (or, with `manager`, the pool behind a nodepool) with `size`
        members, already running unless `running` is False; `pool_id` fixes its id."""
        with self.lock:
            pid = self._new_id(pool_id)
            self.pools[pid] = {
                "id": pid,
                "name": name,
                "size": 0,
                "type": self.find_type(instance_type)["id"],
                "labels": dict(labels or {}),
                "disk": disk_size,
                "manager": manager,
                "instances": [],
                "created": self.clock(),
            }
            self._grow(self.pools[pid], size, booted=running)
            return pid

    def add_nodepool(
        self,
        cluster_id: str,
        name: str,
        *,
        instance_type: str = "standard.medium",
        size: int = 0,
        labels: Mapping[str, str] | None = None,
        taints: Mapping[str, Mapping[str, str]] | None = None,
        disk_size: int = 50,
        running: bool = True,
        nodepool_id: str = "",
        pool_id: str = "",
    ) -> tuple[str, str]:
        """An SKS nodepool and its Instance Pool; returns (nodepool id, instance pool id). The ids
        are generated unless given (a seed that names its node groups: the group id is the pool's)."""
        with self.lock:
            npid = self._new_id(nodepool_id)
            pid = self.add_pool(
                f"nodepool-{name}-{npid[:5]}",
                instance_type=instance_type,
                size=size,
                disk_size=disk_size,
                manager=npid,
                running=running,
                pool_id=pool_id,
            )
            self.nodepools[npid] = {
                "id": npid,
                "name": name,
                "cluster": cluster_id,
                "pool": pid,
                "labels": dict(labels or {}),
                "taints": {k: dict(v) for k, v in (taints or {}).items()},
                "created": self.clock(),
            }
            self.clusters[cluster_id]["nodepools"].append(npid)
            return npid, pid

    def seed_demo(
        self,
        cluster_name: str = seed.DEMO_CLUSTER,
        extra_nodepools: Iterable[str] = (),
        nodepools: Iterable[Mapping[str, Any]] | None = None,
    ) -> None:
        """The demo cloud: an SKS cluster with two nodepools (plus one per `extra_nodepools` name) and
        one standalone pool, all members running. `nodepools` (entries shaped as
        `emulator_seed.DEMO_NODEPOOLS`, optionally with `id` and `instance-pool-id`) replaces the
        demo's nodepools and its standalone pool."""
        with self.lock:
            cid = self.add_cluster(cluster_name)
            names = set()
            for np in seed.DEMO_NODEPOOLS if nodepools is None else nodepools:
                names.add(np["name"])
                self.add_nodepool(
                    cid, np["name"], instance_type=np["type"], size=np["size"], labels=np["labels"],
                    taints=np["taints"], nodepool_id=np.get("id", ""), pool_id=np.get("instance-pool-id", ""),
                )  # fmt: skip
            for p in seed.DEMO_POOLS if nodepools is None else ():
                names.add(p["name"])
                self.add_pool(p["name"], instance_type=p["type"], size=p["size"])
            for name in extra_nodepools:
                if name not in names:
                    names.add(name)
                    self.add_nodepool(cid, name, size=1)

    def set_instance_state(self, instance_id: str, state: str | None) -> None:
        """Force an instance's state (`error`, `stopped`, ...); None returns it to its lifecycle."""
        with self.lock:
            self.instances[instance_id]["override"] = state

    def pool_members(self, pool_id: str) -> list[dict[str, Any]]:
        """The pool's instances as list-instances shows them (members and ones being destroyed)."""
        with self.lock:
            self._purge()
            return [self._instance_json(i) for i in self.instances.values() if i["pool"] == pool_id]

    def pool_view(self, pool_id: str) -> dict[str, Any]:
        with self.lock:
            self._purge()
            return self._pool_json(self.pools[pool_id])

    def nodepool_by_name(self, name: str) -> dict[str, Any]:
        with self.lock:
            np = next(n for n in self.nodepools.values() if n["name"] == name)
            return self._nodepool_json(np)

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "clusters": self.clusters,
            "nodepools": self.nodepools,
            "pools": self.pools,
            "instances": self.instances,
            "operations": self.operations,
            "keys": self.keys,
            "allowed": {k: (None if v is None else sorted(v)) for k, v in self.allowed.items()},
            "quota_limit": self.quota_limit,
            "stock": self.stock,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        for name in ("clusters", "nodepools", "pools", "instances", "operations", "keys"):
            getattr(self, name).update(copy.deepcopy(dict(data.get(name) or {})))
        for k, v in (data.get("allowed") or {}).items():
            self.allowed[k] = None if v is None else frozenset(v)
        self.quota_limit = int(data.get("quota_limit", self.quota_limit))
        self.stock.update({str(k): int(v) for k, v in (data.get("stock") or {}).items()})

    # ------------------------------------------------------------------ state machines
    def _instance_state(self, inst: Mapping[str, Any]) -> str:
        if inst.get("destroy_at") is not None:
            return "destroying"
        if inst.get("override"):
            return str(inst["override"])
        if self.clock() - inst["created"] < inst.get("boot", self.boot_seconds):
            return "starting"
        return "running"

    def _purge(self) -> None:
        now = self.clock()
        for iid, inst in list(self.instances.items()):
            if inst.get("destroy_at") is not None and now - inst["destroy_at"] >= self.destroy_seconds:
                del self.instances[iid]

    def _grow(self, pool: dict[str, Any], count: int, *, booted: bool = False) -> None:
        for _ in range(count):
            iid = self._uuid()
            self.instances[iid] = {
                "id": iid,
                "name": f"pool-{pool['id'][:5]}-{iid[:5]}",
                "pool": pool["id"],
                "type": pool["type"],
                "created": self.clock() - (self.boot_seconds if booted else 0.0),
                "boot": 0.0 if booted else self.boot_seconds,
                "destroy_at": None,
                "override": None,
            }
            pool["instances"].append(iid)
        pool["size"] += count

    def _shrink(self, pool: dict[str, Any], ids: Iterable[str]) -> None:
        for iid in list(ids):
            pool["instances"].remove(iid)
            self.instances[iid]["destroy_at"] = self.clock()
            pool["size"] -= 1
            if pool["type"] in self.stock:
                self.stock[pool["type"]] += 1

    def _pool_state(self, pool: Mapping[str, Any]) -> str:
        mine = [i for i in self.instances.values() if i["pool"] == pool["id"]]
        if any(self._instance_state(i) == "starting" for i in mine if i["id"] in pool["instances"]):
            return "scaling-up"
        if any(i.get("destroy_at") is not None for i in mine):
            return "scaling-down"
        return "running"

    def usage(self) -> int:
        self._purge()
        return len(self.instances)

    # ------------------------------------------------------------------ rendering
    def _refs(self) -> dict[str, Any]:
        return {"anti-affinity-groups": [], "security-groups": [], "private-networks": []}

    def _pool_json(self, pool: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": pool["id"],
            "name": pool["name"],
            "size": pool["size"],
            "state": self._pool_state(pool),
            "instances": [{"id": i} for i in pool["instances"]],
            "instance-type": {"id": pool["type"]},
            "template": {"id": seed.TEMPLATE_ID},
            "labels": dict(pool["labels"]),
            "disk-size": pool["disk"],
            "instance-prefix": "pool",
            "ipv6-enabled": False,
            "public-ip-assignment": "inet4",
            "elastic-ips": [],
            **self._refs(),
        }
        if pool.get("manager"):
            out["manager"] = {"id": pool["manager"], "type": "sks-nodepool"}
        return out

    def _instance_json(self, inst: Mapping[str, Any]) -> dict[str, Any]:
        n = int(inst["id"][:4], 16)
        return {
            "id": inst["id"],
            "name": inst["name"],
            "state": self._instance_state(inst),
            "manager": {"id": inst["pool"], "type": "instance-pool"},
            "instance-type": {"id": inst["type"]},
            "template": {"id": seed.TEMPLATE_ID},
            "labels": {},
            "created-at": _iso(inst["created"]),
            "public-ip": f"194.182.{n % 250 + 1}.{n // 250 % 250 + 1}",
        }

    def _nodepool_json(self, np: Mapping[str, Any]) -> dict[str, Any]:
        pool = self.pools[np["pool"]]
        state = self._pool_state(pool)
        return {
            "id": np["id"],
            "name": np["name"],
            "size": pool["size"],
            "state": "scaling" if state.startswith("scaling") else "running",
            "instance-pool": {"id": pool["id"]},
            "instance-type": {"id": pool["type"]},
            "template": {"id": seed.TEMPLATE_ID},
            "labels": dict(np["labels"]),
            "taints": copy.deepcopy(np["taints"]),
            "disk-size": pool["disk"],
            "instance-prefix": "pool",
            "version": "1.33.4",
            "created-at": _iso(np["created"]),
            **self._refs(),
        }

    def _cluster_json(self, c: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": c["id"],
            "name": c["name"],
            "description": "",
            "state": "running",
            "version": "1.33.4",
            "cni": "cilium",
            "level": "pro",
            "auto-upgrade": False,
            "endpoint": f"https://{c['id']}.sks-{self.zone}.exoscale.com:443",
            "created-at": _iso(c["created"]),
            "labels": {},
            "addons": ["exoscale-cloud-controller"],
            "nodepools": [self._nodepool_json(self.nodepools[n]) for n in c["nodepools"]],
        }

    def _operation_json(self, op: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": op["id"], "state": op["state"], "reference": dict(op["reference"])}
        if op["state"] in ("failure", "timeout"):
            out["reason"] = op["reason"]
            if op.get("message"):
                out["message"] = op["message"]
        return out
