"""A thin client for the StackPointCloud API calls the backend needs, on the shared HTTP layer.

Calls and shapes (the SDK StackPointCloud/stackpoint-sdk-go `pkg/stackpointio/client.go` at b87d5ae,
read through the justinhopper fork; the API docs StackPointCloud/stackpoint-api-docs
`source/includes/_nodes.md` and `_nodepools.md` at f612c5f; NetApp/nks-sdk-go `nks/nodes.go`):
Bearer token; bare JSON arrays, no pagination; DRF-style errors `{"detail": "..."}`.

- GET  `orgs/{org}/clusters/{cluster}/nodepools`            -> [pool]
- GET  `orgs/{org}/clusters/{cluster}/nodes`                -> [node] (transitioning or running)
- POST `orgs/{org}/clusters/{cluster}/nodepools/{pk}/add`   {size, node_count, node_pool} -> 201 [node]
- POST `orgs/{org}/clusters/{cluster}/add_node`             {size, node_count, group} -> 201 [node] (gen 1)
- GET  `orgs/{org}/clusters/{cluster}/nodes/{pk}/can_delete` -> {"eligible": true} or 400 {"detail"}
- DELETE `orgs/{org}/clusters/{cluster}/nodes/{pk}`         -> 204

The fork's SDK turned every status >= 400 into "Status code N" and discarded the body; we keep the
API's own words. The fork also throttled itself to one API read per 60 s; our server lists once per
Refresh instead (see driver.py).
"""

from __future__ import annotations

import re
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, MachineGone
from cloudprovider_grpc.http import BearerAuth, HttpClient, RetryPolicy

#: wording that marks a refused add as a capacity problem of the underlying cloud (not documented by
#: SPC: its errors relayed the provider's, e.g. AWS "InstanceLimitExceeded", "InsufficientInstanceCapacity")
_OUT_OF_RESOURCES_RE = re.compile(
    r"quota|limit ?exceeded|instancelimitexceeded|insufficient|capacity|out of stock|not available", re.I
)


def classify_add_error(err: CloudError) -> CloudError:
    """Mark capacity and quota refusals as OUT_OF_RESOURCES so CA backs the group off (class 1)."""
    if err.transient or err.status is None or not 400 <= err.status < 500:
        return err
    if _OUT_OF_RESOURCES_RE.search(err.message):
        return CloudError(
            err.message, error_class=ErrorClass.OUT_OF_RESOURCES, code="OUT_OF_RESOURCES", status=err.status
        )
    return err


def _array(value: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise CloudError(f"spc {what}: expected a JSON array of objects", transient=True, code="BAD_RESPONSE")
    return value


class SpcClient:
    """Typed calls for one organization's cluster over one `HttpClient`. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        token: str,
        org_id: int,
        cluster_id: int,
        *,
        timeout: tuple[float, float] = (3.05, 10.0),
        retries: int = 4,
        rate_limit_per_s: float | None = 10.0,
        max_elapsed: float | None = 8.0,
        user_agent: str = "cloudprovider-grpc/spc",
        clock: Clock | None = None,
    ) -> None:
        self.cluster = f"orgs/{org_id}/clusters/{cluster_id}"
        self.http = HttpClient(
            "spc",
            base_url,
            auth=BearerAuth(token),
            timeout=timeout,
            retry=RetryPolicy(retries=retries),
            rate_limit_per_s=rate_limit_per_s,
            max_elapsed=max_elapsed,
            user_agent=user_agent,
            headers={"Content-Type": "application/json"},
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"SpcClient({self.http!r}, cluster={self.cluster!r})"

    def close(self) -> None:
        self.http.close()

    def list_node_pools(self) -> list[dict[str, Any]]:
        reply = self.http.request("GET", f"{self.cluster}/nodepools", operation="list_nodepools", urgent=True)
        return _array(reply.json(), "list_nodepools")

    def list_nodes(self) -> list[dict[str, Any]]:
        reply = self.http.request("GET", f"{self.cluster}/nodes", operation="list_nodes", urgent=True)
        return _array(reply.json(), "list_nodes")

    def add_to_pool(self, pool_pk: int, size: str, count: int) -> list[dict[str, Any]]:
        """POST `nodepools/{pk}/add` (gen 2 final). Never re-sent after it may have been sent: the
        HTTP layer retries a POST only when it certainly did not reach the API."""
        body = {"size": size, "node_count": count, "node_pool": pool_pk}
        try:
            reply = self.http.request(
                "POST",
                f"{self.cluster}/nodepools/{pool_pk}/add",
                operation="add_nodes",
                json_body=body,
                ok=(200, 201),
            )
        except CloudError as err:
            raise classify_add_error(err) from err
        return _array(reply.json(), "add_nodes")

    def add_node(self, group: str, size: str, count: int) -> list[dict[str, Any]]:
        """POST `add_node` with gen 1's body (`group` = the group id)."""
        body = {"size": size, "node_count": count, "group": group}
        try:
            reply = self.http.request(
                "POST", f"{self.cluster}/add_node", operation="add_node", json_body=body, ok=(200, 201)
            )
        except CloudError as err:
            raise classify_add_error(err) from err
        return _array(reply.json(), "add_node")

    def can_delete(self, node_pk: int) -> None:
        """Raise CloudError (permanent, the API's reason) when the API refuses to delete the node,
        MachineGone when it no longer exists."""
        try:
            reply = self.http.request(
                "GET", f"{self.cluster}/nodes/{node_pk}/can_delete", operation="can_delete"
            )
        except CloudError as err:
            if err.status == 404:
                raise MachineGone(f"spc node {node_pk} not found") from err
            if err.status == 400:
                raise CloudError(err.message, code="NOT_DELETABLE", status=400) from err
            raise
        answer = reply.json()
        if isinstance(answer, dict) and answer.get("eligible") is False:
            raise CloudError(f"spc node {node_pk} is not eligible for deletion", code="NOT_DELETABLE")

    def delete_node(self, node_pk: int) -> None:
        try:
            self.http.request("DELETE", f"{self.cluster}/nodes/{node_pk}", operation="delete_node")
        except CloudError as err:
            if err.status == 404:
                raise MachineGone(f"spc node {node_pk} not found") from err
            raise
