"""A Cherry Servers API emulator served over real HTTP, shipped with the product.

Faithful to what the API documents and its clients rely on (the API documentation
https://api.cherryservers.com/doc/; kubernetes/autoscaler
`cluster-autoscaler/cloudprovider/cherryservers/cherry_manager_rest.go`; cherryservers/cherrygo):
paths under `/v1/`; Bearer auth (401 for a missing or unknown token, 403 for another team's project);
JSON error bodies `{"code": N, "message": "..."}` on every error; `limit`/`offset` pagination with
`X-Total-Count`; server JSON with `id`, `hostname`, `state`, `status`, `plan`, `region`, `tags`,
`ip_addresses`, `created_at` and the rest of the fields the SDK's fixtures show; `deploying` ->
`deployed` after `deploy_seconds` of the (injectable) clock; DELETE answers 204 and the server is gone
(or lingers as `terminating` for `terminate_seconds`); stock per plan and region, an empty one refusing
the create with 400; the 4 requests/s limit as 429 + Retry-After; switchable faults from the base.
Undocumented details (exact stock-out wording, `state` while deploying) are our reconstruction.
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, HttpProblem, Request, Response
from cloudprovider_grpc.emulators.cherry import seed as catalog

#: default team of tokens and projects seeded without an explicit team
DEFAULT_TEAM = 100


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class CherryEmulator(EmulatorServer):
    name = "cherry"
    prefix = "/v1/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tokens: Mapping[str, int] | None = None,
        projects: Mapping[int, int] | None = None,
        stock: Mapping[str, Mapping[str, int]] | None = None,
        deploy_seconds: float = 5.0,
        terminate_seconds: float = 0.0,
        plans: list[dict[str, Any]] | None = None,
        regions: list[dict[str, Any]] | None = None,
        images: list[dict[str, str]] | None = None,
        clock: Clock | Callable[[], float] | None = None,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = None,
        state_file: Path | None = None,
    ) -> None:
        super().__init__(
            host, port, clock=clock, faults=faults, rate_limit_per_s=rate_limit_per_s, state_file=state_file
        )
        #: token -> team id
        self.tokens: dict[str, int] = dict(tokens or {})
        #: project id -> team id
        self.projects: dict[int, int] = dict(projects or {})
        self.deploy_seconds = deploy_seconds
        self.terminate_seconds = terminate_seconds
        self.plans = copy.deepcopy(plans or catalog.PLANS)
        self.regions = copy.deepcopy(regions or catalog.REGIONS)
        self.images = copy.deepcopy(images or catalog.IMAGES)
        #: "plan_slug|region_slug" -> servers in stock
        self.stock: dict[str, int] = {}
        self.set_stock(stock if stock is not None else {"*": {"*": 100}})
        self.servers: dict[int, dict[str, Any]] = {}
        self.next_id = 600001
        self.fail_next_deployments = 0
        #: answer DELETE with a 204 that has no Content-Type (the in-tree client failed on that,
        #: cherry-spc.md §A4.5; whether the live API does it is unknown)
        self.bare_204 = False

        v = self.prefix.rstrip("/")
        self.route("GET", f"{v}/projects/{{pid}}/servers", self._list_servers)
        self.route("POST", f"{v}/projects/{{pid}}/servers", self._create_server)
        self.route("GET", f"{v}/projects/{{pid}}", self._get_project)
        self.route("GET", f"{v}/servers/{{sid}}", self._get_server)
        self.route("PUT", f"{v}/servers/{{sid}}", self._update_server)
        self.route("DELETE", f"{v}/servers/{{sid}}", self._delete_server)
        self.route("GET", f"{v}/plans", self._list_plans)
        self.route("GET", f"{v}/plans/{{plan}}", self._get_plan)
        self.route("GET", f"{v}/teams/{{tid}}/plans", self._list_team_plans)
        self.route("GET", f"{v}/regions", self._list_regions)

    # ------------------------------------------------------------------ seeding and inspection
    def add_project(self, project_id: int, team: int = DEFAULT_TEAM) -> None:
        with self.lock:
            self.projects[int(project_id)] = team

    def set_stock(self, stock: Mapping[str, Mapping[str, int]]) -> None:
        """Set quantities: {plan slug, id or "*": {region slug, name or "*": qty}}; specific keys win."""
        with self.lock:
            for plan in self.plans:
                pkeys = [str(plan["slug"]), str(plan["id"]), "*"]
                for region in self.regions:
                    rkeys = [region["slug"], region["name"], "*"]
                    qty = next(
                        (stock[p][r] for p in pkeys if p in stock for r in rkeys if r in stock[p]),
                        None,
                    )
                    if qty is not None:
                        self.stock[f"{plan['slug']}|{region['slug']}"] = int(qty)

    def server_records(self, project_id: int | None = None) -> list[dict[str, Any]]:
        """The emulated cloud's servers as stored (with `user_data` as sent), sorted by id."""
        with self.lock:
            self._purge()
            return [
                copy.deepcopy(s)
                for _, s in sorted(self.servers.items())
                if project_id is None or s["project_id"] == project_id
            ]

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "servers": list(self.servers.values()),
            "next_id": self.next_id,
            "stock": self.stock,
            "tokens": self.tokens,
            "projects": {str(k): v for k, v in self.projects.items()},
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.servers = {int(s["id"]): dict(s) for s in data.get("servers", [])}
        self.next_id = int(data.get("next_id", self.next_id))
        self.stock.update({str(k): int(v) for k, v in data.get("stock", {}).items()})
        self.tokens.update({str(k): int(v) for k, v in data.get("tokens", {}).items()})
        self.projects.update({int(k): int(v) for k, v in data.get("projects", {}).items()})

    # ------------------------------------------------------------------ auth and errors
    def authenticate(self, request: Request) -> int:
        header = request.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        team = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if team is None:
            raise HttpProblem(401, "Unauthorized: missing or invalid API token")
        return team

    def _project(self, req: Request) -> int:
        try:
            pid = int(req.params["pid"])
        except ValueError:
            raise HttpProblem(404, "Project not found") from None
        team = self.projects.get(pid)
        if team is None:
            raise HttpProblem(404, "Project not found")
        if team != req.principal:
            raise HttpProblem(403, "Access denied: project belongs to another team")
        return pid

    def _server(self, req: Request) -> dict[str, Any]:
        self._purge()
        try:
            server = self.servers.get(int(req.params["sid"]))
        except ValueError:
            server = None
        if server is None:
            raise HttpProblem(404, "Server not found")
        if self.projects.get(server["project_id"]) != req.principal:
            raise HttpProblem(403, "Access denied: server belongs to another team")
        return server

    # ------------------------------------------------------------------ lookups and rendering
    def _find_plan(self, key: Any) -> dict[str, Any] | None:
        k = str(key).strip().lower()
        return next((p for p in self.plans if str(p["slug"]).lower() == k or str(p["id"]) == k), None)

    def _find_region(self, key: Any) -> dict[str, Any] | None:
        k = str(key).strip().lower()
        return next(
            (r for r in self.regions if k in (r["slug"].lower(), r["name"].lower(), str(r["id"]))),
            None,
        )

    def _find_image(self, key: Any) -> dict[str, str] | None:
        k = str(key).strip().lower()
        return next((i for i in self.images if k in (i["slug"].lower(), i["name"].lower())), None)

    def _region_json(self, region: Mapping[str, Any]) -> dict[str, Any]:
        return {**region, "href": f"/regions/{region['id']}", "bgp": {"hosts": [], "asn": 0}}

    def _plan_json(self, plan: Mapping[str, Any], with_regions: bool = True) -> dict[str, Any]:
        out = copy.deepcopy(dict(plan))
        if with_regions:
            out["available_regions"] = [
                {**self._region_json(r), "stock_qty": qty, "spot_qty": 0}
                for r in self.regions
                if (qty := self.stock.get(f"{plan['slug']}|{r['slug']}")) is not None
            ]
        return out

    def _status(self, s: Mapping[str, Any]) -> tuple[str, str]:
        """(state, status) now; `state` while deploying is not documented, "pending" is our choice."""
        if s.get("terminating_at") is not None:
            return "terminating", "terminating"
        if s.get("failed"):
            return "pending", "failed deployment"
        if self.clock() - s["created"] >= self.deploy_seconds:
            return "active", "deployed"
        return "pending", "deploying"

    def _server_json(self, s: Mapping[str, Any]) -> dict[str, Any]:
        plan = self._find_plan(s["plan"]) or {"slug": s["plan"], "name": s["plan"], "id": 0}
        region = self._find_region(s["region"]) or {"id": 0, "slug": s["region"], "name": s["region"]}
        image = self._find_image(s["image"]) or {"slug": s["image"], "name": s["image"]}
        state, status = self._status(s)
        hourly = next((p["price"] for p in plan.get("pricing", []) if p["unit"] == "Hourly"), 0.0)
        project = {
            "id": s["project_id"],
            "name": f"project-{s['project_id']}",
            "bgp": {"enabled": False, "local_asn": 0},
            "href": f"/projects/{s['project_id']}",
        }
        return {
            "id": s["id"],
            "name": plan["name"],
            "href": f"/servers/{s['id']}",
            "hostname": s["hostname"],
            "image": image["name"],
            "deployed_image": {"name": image["name"], "slug": image["slug"]},
            "spot_instance": bool(s.get("spot")),
            "region": self._region_json(region),
            "state": state,
            "status": status,
            "bgp": {"enabled": False, "available": False, "status": "Disabled", "routers": 0, "connected": 0},
            "plan": self._plan_json(plan, with_regions=False),
            "pricing": {"id": 37, "unit": "Hours", "currency": "EUR", "unit_price": hourly, "price": hourly},
            "ip_addresses": [
                {
                    "id": f"ip-{s['id']}",
                    "address": s["ip"],
                    "address_family": 4,
                    "cidr": f"{s['ip']}/32",
                    "type": "primary-ip",
                    "region": self._region_json(region),
                    "href": f"/ips/ip-{s['id']}",
                }
            ],
            "ssh_keys": [{"id": k, "href": f"/ssh-keys/{k}"} for k in s.get("ssh_keys", [])],
            "tags": dict(s["tags"]),
            "project": project,
            "created_at": _iso(s["created"]),
            "termination_date": None,
        }

    def _purge(self) -> None:
        """Drop servers whose termination finished."""
        now = self.clock()
        for sid, s in list(self.servers.items()):
            if s.get("terminating_at") is not None and now - s["terminating_at"] >= self.terminate_seconds:
                del self.servers[sid]

    # ------------------------------------------------------------------ handlers
    @staticmethod
    def _int_arg(req: Request, name: str) -> int:
        raw = req.arg(name, "0") or "0"
        try:
            value = int(raw)
        except ValueError:
            raise HttpProblem(400, f"{name} must be an integer") from None
        if value < 0:
            raise HttpProblem(400, f"{name} must not be negative")
        return value

    def _list_servers(self, req: Request) -> Response:
        pid = self._project(req)
        self._purge()
        limit, offset = self._int_arg(req, "limit"), self._int_arg(req, "offset")
        rows = [self._server_json(s) for _, s in sorted(self.servers.items()) if s["project_id"] == pid]
        page = rows[offset : offset + limit] if limit else rows[offset:]
        return Response(200, page, {"X-Total-Count": str(len(rows))})

    def _get_project(self, req: Request) -> Response:
        pid = self._project(req)
        return Response(200, {"id": pid, "name": f"project-{pid}", "href": f"/projects/{pid}"})

    def _get_server(self, req: Request) -> Response:
        return Response(200, self._server_json(self._server(req)))

    def _update_server(self, req: Request) -> Response:
        server = self._server(req)
        body = req.json() or {}
        if not isinstance(body, dict):
            raise HttpProblem(400, "request body must be a JSON object")
        if "tags" in body and body["tags"] is not None:
            server["tags"] = self._tags(body["tags"])
        if isinstance(body.get("hostname"), str) and body["hostname"]:
            server["hostname"] = body["hostname"]
        return Response(201, self._server_json(server))

    def _delete_server(self, req: Request) -> Response:
        server = self._server(req)
        if server.get("terminating_at") is None:
            key = f"{server['plan']}|{server['region']}"
            if key in self.stock:
                self.stock[key] += 1
            if self.terminate_seconds > 0:
                server["terminating_at"] = self.clock()
            else:
                del self.servers[server["id"]]
        return Response(204, headers={"Content-Type": None} if self.bare_204 else {})

    @staticmethod
    def _tags(value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise HttpProblem(400, "tags must be an object of string keys and values")
        return {k: str(v) for k, v in value.items()}

    def _create_server(self, req: Request) -> Response:
        pid = self._project(req)
        body = req.json()
        if not isinstance(body, dict):
            raise HttpProblem(400, "request body must be a JSON object")
        if body.get("project_id") not in (None, pid, str(pid)):
            raise HttpProblem(400, f"project_id {body['project_id']} does not match the project in the path")
        plan = self._find_plan(body.get("plan") or body.get("plan_id") or "")
        if plan is None:
            raise HttpProblem(400, "Given server plan was not found.")  # live wording (terraform provider #5)
        region = self._find_region(body.get("region") or "")
        if region is None:
            raise HttpProblem(400, "Given region was not found.")
        image = self._find_image(body.get("image") or "")
        if image is None:
            raise HttpProblem(400, "Given image was not found.")
        ssh_keys: list[int] = []
        for k in body.get("ssh_keys") or []:
            if isinstance(k, bool) or not (isinstance(k, int) or (isinstance(k, str) and k.isdigit())):
                raise HttpProblem(400, f"ssh_keys must hold integer ids, got {k!r}")
            ssh_keys.append(int(k))
        user_data = body.get("user_data") or ""
        if not isinstance(user_data, str):
            raise HttpProblem(400, "user_data must be a base64 string")
        if user_data:
            try:
                base64.b64decode(user_data, validate=True)
            except (binascii.Error, ValueError):
                raise HttpProblem(400, "user_data must be base64 encoded") from None
        partition = body.get("os_partition_size")
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise HttpProblem(400, "os_partition_size must be a non-negative integer")
        tags = self._tags(body["tags"]) if body.get("tags") is not None else {}
        key = f"{plan['slug']}|{region['slug']}"
        if self.stock.get(key, 0) <= 0:
            raise HttpProblem(400, f"Plan {plan['slug']} is out of stock in region {region['slug']}.")
        self.stock[key] -= 1
        sid = self.next_id
        self.next_id += 1
        hostname = body.get("hostname") or f"server-{sid}"
        failed = self.fail_next_deployments > 0
        if failed:
            self.fail_next_deployments -= 1
        server = {
            "id": sid,
            "project_id": pid,
            "hostname": str(hostname),
            "plan": plan["slug"],
            "region": region["slug"],
            "image": image["slug"],
            "ssh_keys": ssh_keys,
            "user_data": user_data,
            "tags": tags,
            "os_partition_size": partition,
            "spot": bool(body.get("spot_market")),
            "created": self.clock(),
            "terminating_at": None,
            "failed": failed,
            "ip": str(ipaddress.IPv4Address("10.0.0.0") + (sid % 65000) + 1),
        }
        self.servers[sid] = server
        return Response(201, self._server_json(server))

    def _list_plans(self, req: Request) -> Response:
        return Response(200, [self._plan_json(p) for p in self.plans])

    def _list_team_plans(self, req: Request) -> Response:
        if str(req.principal) != req.params["tid"]:
            raise HttpProblem(403, "Access denied: another team")
        return self._list_plans(req)

    def _get_plan(self, req: Request) -> Response:
        plan = self._find_plan(req.params["plan"])
        if plan is None:
            raise HttpProblem(404, "Plan not found")
        return Response(200, self._plan_json(plan))

    def _list_regions(self, req: Request) -> Response:
        return Response(200, [self._region_json(r) for r in self.regions])
