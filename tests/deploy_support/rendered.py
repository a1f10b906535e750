"""Every layout rendered once per session, and what the deployment tests read from its objects.

The layouts are those of tests/deploy_support/layouts.py (each kustomization, the official chart
with each of our values files, our chart with each cloud); the tests under tests/deploy/ share
them through `rendered()`, which renders each once and hands every caller its own copy. The
readers name what the tests hold a layout to: our workload and its arguments, whether it elects a
leader or reports its status, cluster-autoscaler's parsed cloud-config, and the schema (or CRD)
each object is validated against.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import kubernetes_validate
import yaml

from cloudprovider_grpc import __version__
from cloudprovider_grpc.providers.registry import BACKENDS as REGISTERED_BACKENDS
from tests.deploy_support import crds
from tests.deploy_support.layouts import OUR_CHART, ROOT, helm_layouts, kustomize_layouts
from tests.deploy_support.pods import (
    ContainerView,
    container,
    find,
    flag_value,
    load_documents,
    pod_containers,
)
from tests.deploy_support.tools import Objects

OUR_CONTAINER = "cloudprovider-grpc"
CA_CONTAINER = "cluster-autoscaler"
CA_DEPLOYMENT = "cluster-autoscaler"
#: Every cloud our chart knows (its values' `backends`); the registry says which exist in this build.
CHART_BACKENDS = list(yaml.safe_load((OUR_CHART / "values.yaml").read_text())["backends"])
LAYOUTS = {layout.name: layout for layout in [*kustomize_layouts(), *helm_layouts(CHART_BACKENDS)]}
SIDECARS = [name for name, layout in LAYOUTS.items() if layout.shape == "sidecar"]
STANDALONES = [name for name, layout in LAYOUTS.items() if layout.shape == "standalone"]
#: Layouts whose cloud is implemented in this build: their server arguments can be checked.
RUNNABLE = [name for name, layout in LAYOUTS.items() if layout.backend in REGISTERED_BACKENDS]

# Every Kubernetes schema from 1.33 (native sidecar containers are GA there) to the newest installed.
SCHEMA_VERSIONS = sorted(
    {v for v in kubernetes_validate.utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 33)},
    key=lambda v: tuple(map(int, v.split("."))),
)


def project_version() -> str:
    """The one version (cloudprovider_grpc/__init__.py) the package, image and chart share."""
    return __version__


@functools.cache
def _render(name: str) -> tuple[str, ...]:
    # Cached as text so that no test can change what another one sees.
    return tuple(json.dumps(obj) for obj in LAYOUTS[name].render())


def rendered(name: str) -> Objects:
    """The objects of one layout, rendered once per session by the real tool."""
    return [json.loads(text) for text in _render(name)]


def example_secrets(layout: str) -> Objects:
    """The example Secrets a cloud's overlay ships (manifests/providers/<cloud>/secrets.example.yaml)."""
    if LAYOUTS[layout].backend == "sim":
        return []
    path = LAYOUTS[layout].example_secrets_file()
    assert path.is_file(), (
        f"{layout}: its cloud is registered but ships no {path.relative_to(ROOT)} to test with"
    )
    return load_documents(path)


def our_workload(objects: Objects) -> dict[str, Any]:
    """The Deployment that holds our container (CA's pod for the sidecar, our own otherwise)."""
    (found,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and any(c["name"] == OUR_CONTAINER for c in pod_containers(o))
    ]
    return found


def our_args(objects: Objects) -> list[str]:
    args = list(container(our_workload(objects), OUR_CONTAINER).get("args") or [])
    assert args[0] == "serve", "the container must run `serve` (the image's CMD, spelled out)"
    return args[1:]


def leader_elected(objects: Objects) -> bool:
    """Whether our server runs `--leader-elect` (a flag, or the setting's environment variable)."""
    ours = container(our_workload(objects), OUR_CONTAINER)
    env = {v["name"]: v.get("value") for v in ours.get("env") or []}
    return (
        "--leader-elect" in our_args(objects) or env.get("CLOUDPROVIDER_GRPC_LEADER_ELECT__ENABLED") == "true"
    )


def kube_status(objects: Objects) -> bool:
    """Whether our server runs `--kube-status` (a flag, or the setting's environment variable)."""
    ours = container(our_workload(objects), OUR_CONTAINER)
    env = {v["name"]: v.get("value") for v in ours.get("env") or []}
    return "--kube-status" in our_args(objects) or env.get("CLOUDPROVIDER_GRPC_KUBE_STATUS") == "true"


def ca_cloud_config(objects: Objects) -> tuple[ContainerView, dict[str, Any], str]:
    """cluster-autoscaler's container, its parsed --cloud-config, and the file's path in the pod."""
    view = ContainerView(find(objects, "Deployment", CA_DEPLOYMENT), CA_CONTAINER, objects)
    path = flag_value(view.args, "--cloud-config")
    assert path, "cluster-autoscaler has no --cloud-config"
    hit = view.mount_path_of(path)
    assert hit, f"--cloud-config {path} is not inside any volume mounted into cluster-autoscaler"
    mount, rel = hit
    files = view.volume_files(mount["name"])
    assert rel in files, f"{path}: the mounted volume has no {rel!r} (has {sorted(files)})"
    return view, yaml.safe_load(files[rel]), path


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _parse_schemas_once() -> None:
    """kubernetes-validate opens and parses its JSON schema files on every call (the object's own
    schema and the whole `_definitions.json`): three quarters of a validation's time, thousands of
    times per run. Its reader (`kubernetes_validate.utils.schema_contents`, looked up as a module
    global on each call) is made to keep what it parsed; the schemas are only read, never changed,
    by the validation."""
    utils = kubernetes_validate.utils
    if not hasattr(utils.schema_contents, "cache_info"):
        utils.schema_contents = functools.cache(utils.schema_contents)


_parse_schemas_once()


def validate(obj: dict[str, Any], version: str) -> None:
    if crds.is_custom(obj):
        crds.validate(obj)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


def deploying_section() -> str:
    """The user's deployment guide (docs/deploying.md), whose commands these tests hold to the layouts."""
    return (ROOT / "docs" / "deploying.md").read_text()
