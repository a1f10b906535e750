"""A small client for the Exoscale API v2 calls the backend needs, on the shared HTTP layer.

Calls (OperationIds as IAM names them; paths from the OpenAPI document python-exoscale ships):
`list-sks-clusters` GET /sks-cluster, `list-instance-pools` GET /instance-pool, `list-instances`
GET /instance?manager-id=&manager-type=instance-pool, `get-instance-type` GET /instance-type/{id},
`get-quota` GET /quota/instance, `scale-sks-nodepool` PUT /sks-cluster/{id}/nodepool/{np}:scale,
`scale-instance-pool` PUT /instance-pool/{id}:scale, `evict-sks-nodepool-members` PUT
.../nodepool/{np}:evict, `evict-instance-pool-members` PUT /instance-pool/{id}:evict and
`get-operation` GET /operation/{id}. Every success is HTTP 200 with JSON; mutating calls answer an
`operation` (the OpenAPI document python-exoscale ships). Errors carry `{"message": ...}`.

Requests are signed as `formats/exoscale_signature.py` describes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass
from cloudprovider_grpc.formats.exoscale_signature import SIGNATURE_TTL, authorization
from cloudprovider_grpc.http import HttpClient, RetryPolicy, SecretAuth

#: quota refusals, whether answered synchronously or as a failed operation's message (the live
#: wording is not documented: this pattern is our assumption)
QUOTA_RE = re.compile(r"quota|limit (?:reached|exceeded)|insufficient", re.I)


class ExoscaleAuth(SecretAuth):
    """Signs each request over the exact body bytes `requests` is about to send."""

    def __init__(self, key: str, secret: str, *, now: Callable[[], float] = time.time) -> None:
        super().__init__(secret)
        self._key = key
        self._now = now

    def redact(self, text: str) -> str:
        text = super().redact(text)
        return text.replace(self._key, "***") if self._key else text

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        body = r.body or b""
        if isinstance(body, str):
            body = body.encode()
        expires = int(self._now()) + SIGNATURE_TTL
        r.headers["Authorization"] = authorization(
            self._key, self._secret, r.method or "GET", r.url or "", body, expires
        )
        return r


def classify(err: CloudError) -> CloudError:
    """Quota refusals become OUT_OF_RESOURCES (class 1) so CA backs the group off; a 409 (the pool
    is busy with another operation; our reading, the API documents no 409) is worth retrying later."""
    if err.status == 409:
        return CloudError(err.message, transient=True, code=err.code, status=409)
    if not err.transient and QUOTA_RE.search(err.message):
        return CloudError(
            err.message, error_class=ErrorClass.OUT_OF_RESOURCES, code="QUOTA_EXCEEDED", status=err.status
        )
    return err


class ExoscaleClient:
    """Typed calls over one `HttpClient`. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        key: str,
        secret: str,
        *,
        timeout: tuple[float, float] = (3.05, 10.0),
        retries: int = 4,
        rate_limit_per_s: float | None = 10.0,
        max_elapsed: float | None = 8.0,
        user_agent: str = "cloudprovider-grpc/exoscale",
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.http = HttpClient(
            "exoscale",
            base_url,
            auth=ExoscaleAuth(key, secret, now=now),
            timeout=timeout,
            retry=RetryPolicy(retries=retries),
            rate_limit_per_s=rate_limit_per_s,
            # a second's worth saved up: the limit only smooths sustained load (Exoscale publishes
            # none), so an idle client's Refresh (one listing per pool, plus the cluster and the pools)
            # goes out at once; with a burst of 1 each call after the first waited 1/rate (400-500 ms
            # per Refresh of the demo cloud's 5 calls at 10/s)
            rate_burst=max(1.0, rate_limit_per_s or 1.0),
            max_elapsed=max_elapsed,
            user_agent=user_agent,
            sleep=sleep,
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"ExoscaleClient({self.http!r})"

    def close(self) -> None:
        self.http.close()

    def _get(
        self, path: str, operation: str, params: Mapping[str, str] | None = None, urgent: bool = True
    ) -> Any:
        return self.http.request(
            "GET", path, operation=operation, params=params, ok=(200,), urgent=urgent
        ).json()

    def _put(self, path: str, operation: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            reply = self.http.request("PUT", path, operation=operation, json_body=dict(body), ok=(200,))
        except CloudError as err:
            raise classify(err) from err
        op = reply.json()
        if not isinstance(op, dict) or not isinstance(op.get("id"), str):
            # accepted, but we cannot follow it: transient, the machinery retries the absolute call
            raise CloudError(f"exoscale {operation}: the answer carries no operation id", transient=True)
        return op

    @staticmethod
    def _list(data: Any, key: str, operation: str) -> list[dict[str, Any]]:
        items = data.get(key) if isinstance(data, dict) else None
        if items is None:
            return []
        if not isinstance(items, list):
            raise CloudError(f"exoscale {operation}: `{key}` is not a list", transient=True)
        return [i for i in items if isinstance(i, dict)]

    # ---- reads ----
    def list_sks_clusters(self) -> list[dict[str, Any]]:
        return self._list(self._get("sks-cluster", "list-sks-clusters"), "sks-clusters", "list-sks-clusters")

    def list_instance_pools(self) -> list[dict[str, Any]]:
        return self._list(
            self._get("instance-pool", "list-instance-pools"), "instance-pools", "list-instance-pools"
        )

    def list_pool_instances(self, pool_id: str) -> list[dict[str, Any]]:
        """Every instance the pool manages, in one call (never one get-instance per member)."""
        data = self._get(
            "instance", "list-instances", params={"manager-id": pool_id, "manager-type": "instance-pool"}
        )
        return self._list(data, "instances", "list-instances")

    def get_instance_type(self, type_id: str) -> dict[str, Any]:
        data = self._get(f"instance-type/{type_id}", "get-instance-type", urgent=False)
        if not isinstance(data, dict):
            raise CloudError("exoscale get-instance-type: not a JSON object", transient=True)
        return data

    def get_quota(self, entity: str = "instance") -> dict[str, Any]:
        data = self._get(f"quota/{entity}", "get-quota", urgent=False)
        if not isinstance(data, dict):
            raise CloudError("exoscale get-quota: not a JSON object", transient=True)
        return data

    def get_operation(self, op_id: str) -> dict[str, Any]:
        data = self._get(f"operation/{op_id}", "get-operation", urgent=False)
        if not isinstance(data, dict):
            raise CloudError("exoscale get-operation: not a JSON object", transient=True)
        return data

    # ---- changes (each answers an operation; none is waited for here) ----
    def scale_instance_pool(self, pool_id: str, size: int) -> dict[str, Any]:
        return self._put(f"instance-pool/{pool_id}:scale", "scale-instance-pool", {"size": size})

    def scale_sks_nodepool(self, cluster_id: str, nodepool_id: str, size: int) -> dict[str, Any]:
        return self._put(
            f"sks-cluster/{cluster_id}/nodepool/{nodepool_id}:scale", "scale-sks-nodepool", {"size": size}
        )

    def evict_instance_pool_members(self, pool_id: str, instances: Sequence[str]) -> dict[str, Any]:
        return self._put(
            f"instance-pool/{pool_id}:evict", "evict-instance-pool-members", {"instances": list(instances)}
        )

    def evict_sks_nodepool_members(
        self, cluster_id: str, nodepool_id: str, instances: Sequence[str]
    ) -> dict[str, Any]:
        return self._put(
            f"sks-cluster/{cluster_id}/nodepool/{nodepool_id}:evict",
            "evict-sks-nodepool-members",
            {"instances": list(instances)},
        )
