"""The Lease of `serve --leader-elect`: where it lives (namespace), who holds it (identity), and
how it is read and written through the official client, with optimistic concurrency (every
update carries the resourceVersion it was read at, so two candidates can never both win)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.errors import ConfigError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaseLock:
    """Reads and writes one Lease through the official client, with optimistic concurrency."""

    def __init__(self, api: Any, namespace: str, name: str, timeout: float) -> None:
        self.api, self.namespace, self.name, self.timeout = api, namespace, name, timeout

    def get(self) -> Any | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, spec: Any, annotations: dict[str, str]) -> Any:
        from kubernetes import client

        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, annotations=annotations or None
            ),
            spec=spec,
        )
        return self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.timeout)

    def replace(self, lease: Any) -> Any:
        return self.api.replace_namespaced_lease(
            self.name, self.namespace, lease, _request_timeout=self.timeout
        )


def api_problem(exc: BaseException) -> str:
    """One line about a failed Lease call, without response bodies or headers."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status:
        return f"HTTP {status} {reason or ''}".strip()
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}".rstrip(": ")


def default_identity(configured: str) -> str:
    return configured or os.environ.get("POD_NAME") or socket.gethostname()


def default_namespace(configured: str) -> str:
    if configured:
        return configured
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def coordination_api(kubeconfig: Path | None) -> Any:
    """The coordination/v1 API: from `kubeconfig`, else the pod's service account (in-cluster)."""
    from kubernetes import client, config

    try:
        if kubeconfig is not None:
            api_client = config.new_client_from_config(config_file=str(kubeconfig))
        else:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            api_client = client.ApiClient(cfg)
    except config.ConfigException as exc:
        where = str(kubeconfig) if kubeconfig else "the in-cluster service account"
        raise ConfigError("leader_elect", f"no Kubernetes API configuration from {where}: {exc}") from None
    return client.CoordinationV1Api(api_client)


__all__ = ["LeaseLock", "api_problem", "coordination_api", "default_identity", "default_namespace"]
