"""A thin client for the Cherry Servers API calls the provider needs, on the shared HTTP layer.

Endpoints and shapes (kubernetes/autoscaler cherry_manager_rest.go; cherrygo; api.cherryservers.com/doc):
GET `projects/{id}/servers` (paginated with `limit`/`offset`, total in `X-Total-Count`),
GET `servers/{id}`, POST `projects/{id}/servers`, DELETE `servers/{id}` (204), GET `plans`.
Errors come back as `{"code": N, "message": "..."}`; the HTTP layer turns them into `CloudError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.http import BearerAuth, HttpClient, RetryPolicy
from cloudprovider_grpc.providers.contract import ErrorClass
from cloudprovider_grpc.providers.driver import CloudError, MachineGone

#: Server-list page size. The in-tree provider sent one GET without paging and got every server, so
#: the API answers large pages; 500 keeps a 200-node cluster at one request per Refresh, and larger
#: projects are followed page by page via X-Total-Count.
PAGE_SIZE = 500

# The live API's out-of-stock and quota wording is not documented (cherry-spc.md §C.3); these cover the
# emulator's messages and the plausible live ones ("out of stock", "not available", "limit", "quota").
_OUT_OF_RESOURCES_RE = re.compile(
    r"out of stock|no stock|not in stock|insufficient|quota|limit (?:reached|exceeded)|not available in",
    re.I,
)


def classify_create_error(err: CloudError) -> CloudError:
    """Mark stockouts and quota refusals as OUT_OF_RESOURCES so CA backs the pool off (class 1)."""
    if err.transient or err.status not in (400, 402, 403, 409, 422):
        return err
    if _OUT_OF_RESOURCES_RE.search(err.message):
        return CloudError(
            err.message, error_class=ErrorClass.OUT_OF_RESOURCES, code="OUT_OF_STOCK", status=err.status
        )
    return err


class CherryClient:
    """Typed calls over one `HttpClient`. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: tuple[float, float] = (3.05, 10.0),
        retries: int = 4,
        rate_limit_per_s: float | None = 4.0,
        max_elapsed: float | None = 60.0,
        user_agent: str = "cloudprovider-grpc/cherry",
        page_size: int = PAGE_SIZE,
        clock: Clock | None = None,
    ) -> None:
        self.page_size = page_size
        self.http = HttpClient(
            "cherry",
            base_url,
            auth=BearerAuth(token),
            timeout=timeout,
            retry=RetryPolicy(retries=retries),
            rate_limit_per_s=rate_limit_per_s,
            max_elapsed=max_elapsed,
            user_agent=user_agent,
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"CherryClient({self.http!r})"

    def close(self) -> None:
        self.http.close()

    def list_servers(self, project_id: int, page_size: int | None = None) -> list[dict[str, Any]]:
        """Every server of the project, following `limit`/`offset` pages until `X-Total-Count`."""
        page_size = page_size or self.page_size
        servers: list[dict[str, Any]] = []
        offset = 0
        while True:
            reply = self.http.request(
                "GET",
                f"projects/{project_id}/servers",
                operation="list_servers",
                params={"limit": page_size, "offset": offset},
                urgent=True,
            )
            page = reply.json() or []
            if not isinstance(page, list):
                raise CloudError(
                    f"cherry list_servers: expected a JSON array, got {type(page).__name__}", transient=True
                )
            servers.extend(page)
            total_header = reply.headers.get("X-Total-Count")
            try:
                total = int(total_header) if total_header is not None else None
            except ValueError:
                total = None
            offset += len(page)
            # No header: a server that ignores pagination returned everything (or a short page ended it).
            if (
                not page
                or (total is None and len(page) < page_size)
                or (total is not None and offset >= total)
            ):
                return servers

    def create_server(self, project_id: int, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a server. Not retried after it may have been sent (see http/retry.py)."""
        try:
            return self.http.request(
                "POST", f"projects/{project_id}/servers", operation="create_server", json_body=dict(body)
            ).json()
        except CloudError as err:
            raise classify_create_error(err) from err

    def delete_server(self, server_id: int | str) -> None:
        try:
            self.http.request("DELETE", f"servers/{server_id}", operation="delete_server")
        except CloudError as err:
            if err.status == 404:
                raise MachineGone(f"cherry server {server_id} not found") from err
            raise

    def list_plans(self) -> list[dict[str, Any]]:
        plans = self.http.request("GET", "plans", operation="list_plans", urgent=True).json() or []
        if not isinstance(plans, list):
            raise CloudError("cherry list_plans: expected a JSON array", transient=True)
        return plans
