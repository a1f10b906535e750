"""A thin client for the Vultr API v2 calls the VKE backend needs, on the shared HTTP layer.

Endpoints and shapes (govultr v3 kubernetes.go and plans.go; the API
v2 introduction): request paths are absolute (`/v2/...`); `Authorization: Bearer <key>`;
GET `kubernetes/clusters/{id}` -> `{"vke_cluster": {...}}`; GET `.../node-pools` ->
`{"node_pools": [...], "meta": {"total", "links": {"next", "prev"}}}`, paginated with `per_page` and
an opaque `cursor` (`links.next`, "" on the last page); PATCH `.../node-pools/{pool}` with
`{"node_quantity": N}` -> 202 `{"node_pool": {...}}`; DELETE `.../node-pools/{pool}/nodes/{node}` ->
204; GET `plans` -> `{"plans": [...], "meta": ...}`. Every 4xx carries `{"error": "...", "status": N}`.

Retries follow govultr (go-retryablehttp: connection errors, 429 and 5xx, 3 more attempts) for the
calls the HTTP layer deems safe (GET, DELETE). A PATCH of an absolute `node_quantity` is safe to
repeat too, but it is retried by the pool machinery, which re-lists first, not blindly here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, MachineGone
from cloudprovider_grpc.http import BearerAuth, HttpClient, RetryPolicy

#: node pools per list page: the API's documented "usually 100" default
PAGE_SIZE = 100
#: plans per page when loading the catalogue (the catalogue has a few hundred entries)
PLANS_PAGE_SIZE = 500
#: a broken server that keeps handing out cursors must not loop a Refresh forever
MAX_PAGES = 1000

# Vultr does not document the wording of quota or capacity refusals. These cover the emulator's
# messages and the wording seen in public reports of instance creation ("maximum number of active
# instances", "monthly fee limit", "not enough capacity", "unavailable in this location").
_OUT_OF_RESOURCES_RE = re.compile(
    r"quota|limit|insufficient|not enough|capacity|out of stock|unavailable|sold out", re.I
)


def classify(err: CloudError) -> CloudError:
    """Mark quota and capacity refusals of a scale-up as OUT_OF_RESOURCES (CA backs the pool off)."""
    if err.transient or err.status not in (400, 402, 403, 409, 412, 422):
        return err
    if _OUT_OF_RESOURCES_RE.search(err.message):
        return CloudError(
            err.message, error_class=ErrorClass.OUT_OF_RESOURCES, code="OUT_OF_RESOURCES", status=err.status
        )
    return err


class VultrClient:
    """Typed calls over one `HttpClient`. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: tuple[float, float] = (3.05, 4.0),
        retries: int = 3,
        rate_limit_per_s: float | None = 20.0,
        max_elapsed: float | None = 8.0,
        page_size: int = PAGE_SIZE,
        user_agent: str = "cloudprovider-grpc/vultr",
        clock: Clock | None = None,
    ) -> None:
        self.page_size = page_size
        self.http = HttpClient(
            "vultr",
            base_url,
            auth=BearerAuth(token),
            timeout=timeout,
            # govultr waits 333-500 ms between attempts (go-retryablehttp's RetryWaitMin/Max there)
            retry=RetryPolicy(retries=retries, base_backoff=0.35, max_backoff=2.0),
            rate_limit_per_s=rate_limit_per_s,
            rate_burst=max(1.0, (rate_limit_per_s or 1.0) / 2),
            max_elapsed=max_elapsed,
            user_agent=user_agent,
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"VultrClient({self.http!r})"

    def close(self) -> None:
        self.http.close()

    # ---- pagination ----
    def _pages(
        self, path: str, key: str, operation: str, per_page: int, *, urgent: bool
    ) -> Iterator[dict[str, Any]]:
        """Every object of a cursor-paginated list, following `meta.links.next` until it is empty."""
        cursor = ""
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params: dict[str, Any] = {"per_page": per_page}
            if cursor:
                params["cursor"] = cursor
            body = self.http.request("GET", path, operation=operation, params=params, urgent=urgent).json()
            if not isinstance(body, dict) or not isinstance(body.get(key), list):
                raise CloudError(f"vultr {operation}: the answer has no {key!r} list", transient=True)
            for item in body[key]:
                if isinstance(item, dict):
                    yield item
            links = (body.get("meta") or {}).get("links") or {}
            cursor = str(links.get("next") or "")
            if not cursor or not body[key]:
                return
            if cursor in seen:
                raise CloudError(f"vultr {operation}: the API repeated cursor {cursor!r}", transient=True)
            seen.add(cursor)
        raise CloudError(f"vultr {operation}: more than {MAX_PAGES} pages", transient=True)

    # ---- VKE ----
    def get_cluster(self, cluster_id: str) -> dict[str, Any]:
        body = self.http.request(
            "GET", f"v2/kubernetes/clusters/{cluster_id}", operation="get_cluster", urgent=True
        ).json()
        cluster = body.get("vke_cluster") if isinstance(body, dict) else None
        if not isinstance(cluster, dict):
            raise CloudError("vultr get_cluster: the answer has no 'vke_cluster' object", transient=True)
        return cluster

    def list_node_pools(self, cluster_id: str) -> list[dict[str, Any]]:
        """Every node pool of the cluster with its embedded `nodes`, all pages (in-tree read only
        the first)."""
        return list(
            self._pages(
                f"v2/kubernetes/clusters/{cluster_id}/node-pools",
                "node_pools",
                "list_node_pools",
                self.page_size,
                urgent=True,
            )
        )

    def set_node_quantity(self, cluster_id: str, pool_id: str, quantity: int) -> dict[str, Any]:
        """PATCH the pool's `node_quantity`; return the pool as the API echoes it. Quota and
        capacity refusals come back as OUT_OF_RESOURCES."""
        try:
            body = self.http.request(
                "PATCH",
                f"v2/kubernetes/clusters/{cluster_id}/node-pools/{pool_id}",
                operation="update_node_pool",
                json_body={"node_quantity": quantity},
            ).json()
        except CloudError as err:
            raise classify(err) from err
        pool = body.get("node_pool") if isinstance(body, dict) else None
        if not isinstance(pool, dict):
            # The PATCH may have been applied: transient, so the machinery re-lists and pushes again
            # (an absolute size is safe to repeat).
            raise CloudError("vultr update_node_pool: the answer has no 'node_pool' object", transient=True)
        return pool

    def delete_node(self, cluster_id: str, pool_id: str, node_id: str) -> None:
        """DELETE one node of a pool (VKE lowers `node_quantity` with it). A node already gone is
        MachineGone."""
        try:
            self.http.request(
                "DELETE",
                f"v2/kubernetes/clusters/{cluster_id}/node-pools/{pool_id}/nodes/{node_id}",
                operation="delete_node",
            )
        except CloudError as err:
            if err.status == 404:
                raise MachineGone(f"vultr node {node_id} not found in pool {pool_id}") from err
            raise

    # ---- catalogue ----
    def list_plans(self) -> list[dict[str, Any]]:
        return list(self._pages("v2/plans", "plans", "list_plans", PLANS_PAGE_SIZE, urgent=True))
