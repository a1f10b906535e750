"""A minimal Kubernetes REST client (JSON over HTTPS with a client certificate) for the harness.

The harness needs a handful of verbs on a handful of resources (nodes, pods, deployments,
configmaps); a full client library would be a dependency for that alone.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


class KubeError(RuntimeError):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


@dataclass(frozen=True)
class KubeCredentials:
    """Where the API server is and how to authenticate to it (also written into kubeconfigs)."""

    server: str  # https://127.0.0.1:PORT
    ca: Path
    cert: Path
    key: Path

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file for the control-plane components and CA (JSON is valid YAML)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "realca", "cluster": {"server": self.server, "certificate-authority": str(self.ca)}}
            ],
            "users": [
                {"name": "admin", "user": {"client-certificate": str(self.cert), "client-key": str(self.key)}}
            ],
            "contexts": [{"name": "realca", "context": {"cluster": "realca", "user": "admin"}}],
            "current-context": "realca",
        }
        path.write_text(json.dumps(config, indent=1))
        return path


class Kube:
    """JSON requests to the API server; one connection per request keeps it thread-safe."""

    def __init__(self, creds: KubeCredentials, timeout: float = 10) -> None:
        self.creds = creds
        self.timeout = timeout
        url = urllib.parse.urlsplit(creds.server)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self._ssl = ssl.create_default_context(cafile=str(creds.ca))
        self._ssl.load_cert_chain(str(creds.cert), str(creds.key))

    def request(
        self, method: str, path: str, body: JSON | None = None, *, content_type: str = "application/json"
    ) -> JSON:
        data = self.raw(method, path, body, content_type=content_type)
        return json.loads(data) if data else {}

    def raw(
        self, method: str, path: str, body: JSON | None = None, *, content_type: str = "application/json"
    ) -> str:
        """The response body as text (health endpoints answer plain text)."""
        conn = http.client.HTTPSConnection(self._host, self._port, context=self._ssl, timeout=self.timeout)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read().decode()
        finally:
            conn.close()
        if resp.status >= 300:
            raise KubeError(resp.status, method, path, data)
        return data

    def get(self, path: str, **query: str) -> JSON:
        return self.request("GET", path + ("?" + urllib.parse.urlencode(query) if query else ""))

    def items(self, path: str, **query: str) -> list[JSON]:
        return list(self.get(path, **query).get("items") or [])

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: JSON) -> JSON:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, grace_seconds: int | None = None) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds  # type: ignore[assignment]
        try:
            self.request("DELETE", path, body)
        except KubeError as exc:
            if exc.status != 404:
                raise
