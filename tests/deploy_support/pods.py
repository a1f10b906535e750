"""Look inside rendered workloads, and recreate a container's files and environment on disk.

`ContainerView.materialize()` writes every volume a container mounts into a temporary root (from
the ConfigMaps and Secrets that the rendered manifest, an example Secrets file or the test
cert-manager hold) and rewrites the container's arguments so each absolute path under a mount
points into that root. The test can then run our CLI with the very arguments and files the pod
would see.
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: a unix socket's path holds at most 107 bytes; a test's temporary root can be longer than a pod's
SOCKET_PATH_ROOM = 100


def short_link(directory: Path) -> Path:
    """A short path (in the system's temporary directory) that is a link to `directory`: a socket's
    mount, materialized under a long test root, is reached by the same file through it."""
    digest = hashlib.sha256(str(directory).encode()).hexdigest()[:12]
    link = Path(tempfile.gettempdir()) / f"cpg-{digest}"
    if not link.is_symlink():
        link.symlink_to(directory, target_is_directory=True)
    return link


def load_documents(path: Path) -> list[dict[str, Any]]:
    """All non-empty YAML documents of a file."""
    with path.open() as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc is not None]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec inside a workload object, or None for non-workloads."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return spec
    template = spec.get("template")
    if isinstance(template, dict):
        return template.get("spec")
    return None


def pod_containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Init containers (native sidecars included) and containers of a workload, in start order."""
    spec = pod_spec(obj)
    if not spec:
        return []
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise LookupError(f"expected one {kind}/{name}, found {len(found)}")
    return found[0]


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in pod_containers(workload) if c["name"] == name]
    if len(found) != 1:
        raise LookupError(f"expected one container {name!r} in {workload['metadata']['name']}")
    return found[0]


def flag_value(args: list[str], flag: str) -> str | None:
    """Value of `--flag=value` or `--flag value` in an argument list (last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def config_data(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, bytes]:
    """Key -> bytes of a ConfigMap or Secret (stringData and base64 data both honoured)."""
    obj = find(objects, kind, name)
    out = {k: v.encode() for k, v in (obj.get("data") or {}).items()} if kind == "ConfigMap" else {}
    if kind == "Secret":
        out.update({k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()})
        out.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
    return out


@dataclass
class Materialized:
    args: list[str]
    env: dict[str, str]
    root: Path
    mounts: dict[str, Path]  # mountPath -> directory under root


class ContainerView:
    """One container of a workload, resolved against a store of ConfigMaps and Secrets."""

    def __init__(
        self,
        workload: dict[str, Any],
        name: str,
        objects: list[dict[str, Any]],
        extra_secrets: Mapping[str, Mapping[str, bytes]] | None = None,
    ) -> None:
        self.workload = workload
        self.container = container(workload, name)
        self.objects = objects
        self.extra_secrets = dict(extra_secrets or {})
        self.volumes = {v["name"]: v for v in (pod_spec(workload) or {}).get("volumes") or []}

    @property
    def args(self) -> list[str]:
        return list(self.container.get("command") or []) + list(self.container.get("args") or [])

    def secret(self, name: str) -> dict[str, bytes]:
        if name in self.extra_secrets:
            return dict(self.extra_secrets[name])
        return config_data(self.objects, "Secret", name)

    def volume_files(self, volume_name: str) -> dict[str, bytes]:
        """Relative path -> content of what a volume shows inside the container."""
        volume = self.volumes[volume_name]
        if "emptyDir" in volume:
            return {}
        if "projected" in volume:
            files: dict[str, bytes] = {}
            for source in volume["projected"]["sources"]:
                files.update(self._source_files(source))
            return files
        return self._source_files(volume)

    def _source_files(self, source: dict[str, Any]) -> dict[str, bytes]:
        """Files of one volume source (or one source of a projected volume)."""
        if "serviceAccountToken" in source:
            # The kubelet writes a token for the pod's ServiceAccount; any non-empty JWT-shaped text
            # stands in for it here (no API server signs one in these tests).
            return {source["serviceAccountToken"]["path"]: b"eyJhbGciOiJSUzI1NiJ9.e30.test-token"}
        if "configMap" in source:
            spec, kind = source["configMap"], "ConfigMap"
        elif "secret" in source:
            spec, kind = source["secret"], "Secret"
        else:
            raise ValueError(f"unsupported volume source {sorted(source)}")
        name = spec.get("secretName") or spec["name"]
        try:
            data = config_data(self.objects, kind, name) if kind == "ConfigMap" else self.secret(name)
        except LookupError:
            if spec.get("optional"):
                return {}  # the kubelet mounts an empty directory for a missing optional source
            raise
        items = spec.get("items")
        if not items:
            return data
        return {item["path"]: data[item["key"]] for item in items}

    def mount_path_of(self, path: str) -> tuple[dict[str, Any], str] | None:
        """The volumeMount holding absolute `path`, and path relative to it."""
        for mount in self.container.get("volumeMounts") or []:
            prefix = mount["mountPath"].rstrip("/") + "/"
            if path.startswith(prefix):
                return mount, path[len(prefix) :]
        return None

    def field(self, path: str) -> str:
        """The downward API's value for a fieldRef the pod uses."""
        fields = {
            "metadata.namespace": self.workload["metadata"].get("namespace", ""),
            # a pod's name is its workload's plus generated suffixes
            "metadata.name": f"{self.workload['metadata']['name']}-5d8f7c9b6-x2x4q",
            "spec.serviceAccountName": (pod_spec(self.workload) or {}).get("serviceAccountName", ""),
            # an address from a pod network's range (this process listens on loopback only)
            "status.podIP": "10.244.1.17",
        }
        if path not in fields:
            raise ValueError(f"fieldRef {path!r} is not modelled")
        return str(fields[path])

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for var in self.container.get("env") or []:
            if "value" in var:
                out[var["name"]] = var["value"]
                continue
            if "fieldRef" in var["valueFrom"]:
                out[var["name"]] = self.field(var["valueFrom"]["fieldRef"]["fieldPath"])
                continue
            ref = var["valueFrom"]["secretKeyRef"]
            try:
                out[var["name"]] = self.secret(ref["name"])[ref["key"]].decode()
            except LookupError:
                if not ref.get("optional"):
                    raise
        return out

    def materialize(self, root: Path) -> Materialized:
        mounts: dict[str, Path] = {}
        for mount in self.container.get("volumeMounts") or []:
            target = root / mount["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            for rel, content in self.volume_files(mount["name"]).items():
                (target / rel).parent.mkdir(parents=True, exist_ok=True)
                (target / rel).write_bytes(content)
            mounts[mount["mountPath"]] = target
        args = []
        for arg in self.args:
            flag, eq, value = arg.partition("=")
            candidate = value if eq else arg
            # a unix socket's address (unix:///PATH) lives in its volume as much as a file's path
            scheme = "unix://" if candidate.startswith("unix:///") else ""
            candidate = candidate.removeprefix(scheme)
            hit = self.mount_path_of(candidate) if candidate.startswith("/") else None
            if hit:
                directory = mounts[hit[0]["mountPath"]]
                if scheme and len(str(directory / hit[1])) > SOCKET_PATH_ROOM:
                    directory = short_link(directory)
                mapped = scheme + str(directory / hit[1])
                arg = f"{flag}={mapped}" if eq else mapped
            args.append(arg)
        # Paths under a mount, in arguments (above) and in environment values, point into the root.
        env = {}
        for name, value in self.env().items():
            hit = self.mount_path_of(value) if value.startswith("/") else None
            env[name] = str(mounts[hit[0]["mountPath"]] / hit[1]) if hit else value
        return Materialized(args=args, env=env, root=root, mounts=mounts)
