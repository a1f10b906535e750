"""The official cluster-autoscaler chart on the realnode cluster, with the project's sidecar values
(deploy/helm/cluster-autoscaler/sim.yaml), and a second release of the project's chart on an
emulated cloud.

cluster-autoscaler's own image is not to be had here, so the chart's CA container runs a stand-in
(tests/conformance/standin): a static Go program, the only file of a FROM-scratch image, which the
chart starts as `./cluster-autoscaler` with CA's flags. It reads CA's `--cloud-config`, dials the
sidecar as CA does (the project's CA-faithful client), runs CA's calls every scan interval and
answers the chart's liveness probe on :8085/health-check; `/calls` there reports what it called.

The chart is kubernetes/autoscaler's own, 9.59.0, read from the reference material beside the
clone (tests/deploy_support/layouts.py), never a copy in the project."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy_support.layouts import OFFICIAL_CHART, OFFICIAL_VALUES
from tests.preparation.gate import may_build
from tests.realnode.cluster import Cluster
from tests.realnode.image import Podman
from tests.support import conformance, gotools
from tests.support.waits import poll

STANDIN_SOURCE = conformance.SOURCE / "standin"
STANDIN_REPOSITORY = "localhost/cpg-ca-standin"
CA_RELEASE = "cluster-autoscaler"


def standin_key() -> str:
    return gotools.tree_key(
        *conformance._sources(), STANDIN_SOURCE, conformance.PROTO_ROOT, extra=gotools.LDFLAGS
    )


def standin_built() -> bool:
    return (gotools.built_dir("ca-standin", standin_key()) / "standin").is_file()


def standin_image_name() -> str:
    return f"{STANDIN_REPOSITORY}:{standin_key()}"


def standin_binary() -> Path:
    """The stand-in, static (built once per source of it and of the client it uses)."""

    def prepare(scratch: Path) -> Path:
        conformance.prepare(scratch)
        shutil.copytree(STANDIN_SOURCE, scratch / "standin")
        return scratch

    built = gotools.go_build(
        "ca-standin",
        standin_key(),
        prepare,
        ["./standin"],
        env={"CGO_ENABLED": "0"},
        step="standin",
    )
    return built / "standin"


def standin_image(podman: Podman) -> str:
    """The stand-in's image: its binary alone, FROM scratch."""
    image = standin_image_name()
    if podman.exists(image):
        return image
    may_build("standin-image")
    binary = standin_binary()
    context = binary.parent / "context"
    context.mkdir(exist_ok=True)
    shutil.copy2(binary, context / "cluster-autoscaler")
    # CA's image keeps its binary at /cluster-autoscaler and the chart runs `./cluster-autoscaler`.
    (context / "Containerfile").write_text(
        "FROM scratch\nCOPY cluster-autoscaler /cluster-autoscaler\nWORKDIR /\n"
        'ENTRYPOINT ["/cluster-autoscaler"]\n'
    )
    podman.run("build", "-t", image, str(context), timeout=300)
    return image


def helm(node: Cluster, helm_binary: Path, namespace: str, *args: str) -> str:
    """`helm ARGS` against the one-node cluster in `namespace`; its output, or the test fails with
    helm's own words."""
    proc = subprocess.run(
        [str(helm_binary), f"--kubeconfig={node.plane.kubeconfig}", f"--namespace={namespace}", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def sidecar_values(server_image: str, standin: str) -> dict[str, Any]:
    """sim.yaml as shipped, with the suite's images (never pulled) and a 2 s scan interval (CA's
    --scan-interval, which the stand-in honours) so that loops come quickly."""
    values = copy.deepcopy(yaml.safe_load((OFFICIAL_VALUES / "sim.yaml").read_text()))
    repository, tag = standin.rsplit(":", 1)
    values["image"] = {**values.get("image", {}), "repository": repository, "tag": tag, "pullPolicy": "Never"}
    values["extraArgs"] = {**values.get("extraArgs", {}), "scan-interval": "2s"}
    sidecar = next(c for c in values["initContainers"] if c["name"] == "cloudprovider-grpc")
    sidecar["image"], sidecar["imagePullPolicy"] = server_image, "Never"
    return values


@dataclass
class CaPod:
    node: Cluster
    pod: dict[str, Any]
    install_seconds: float

    @property
    def ip(self) -> str:
        return str(self.pod["status"]["podIP"])

    def get(self, port: int, path: str) -> tuple[int, str]:
        """GET `path` from the pod's `port`, from the host (relayed into the cluster's namespace)."""
        return http_get(self.node.forward(self.ip, port), path)

    def calls(self) -> dict[str, Any] | None:
        return standin_report(self.node.forward(self.ip, 8085))


def http_get(address: str, path: str) -> tuple[int, str]:
    """Status and body of a GET (an error status as it is; 0 and the reason when nothing answered)."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def standin_report(address: str) -> dict[str, Any] | None:
    """The stand-in's report at `address` (`loops`, `last_ok`, `calls` and `failed` per RPC)."""
    code, body = http_get(address, "/calls")
    return json.loads(body) if code == 200 else None


def ca_pods(node: Cluster, namespace: str) -> list[dict[str, Any]]:
    out = node.kubectl(
        "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=cluster-autoscaler", "-o", "json"
    ).stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def both_ready(pod: dict[str, Any]) -> bool:
    """The pod Ready, its sidecar (an init container) and CA's container each ready."""
    status = pod.get("status", {})
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    conditions = status.get("conditions") or []
    return (
        len(statuses) == 2
        and all(s.get("ready") for s in statuses)
        and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    )


def install_official_chart(
    node: Cluster, helm_binary: Path, workdir: Path, server_image: str, standin: str
) -> CaPod:
    """`helm install` of the official chart with sim.yaml; the pod once Ready with both containers."""
    namespace = node.plane.namespace("ca")
    values = workdir / "ca-sim-values.yaml"
    values.write_text(yaml.safe_dump(sidecar_values(server_image, standin)))
    started = time.monotonic()
    helm(node, helm_binary, namespace, "install", CA_RELEASE, str(OFFICIAL_CHART), f"--values={values}")
    pods = poll(
        lambda: [p for p in ca_pods(node, namespace) if both_ready(p)] or None,
        180,
        f"the cluster-autoscaler pod Ready with its sidecar:\n{json.dumps(ca_pods(node, namespace))[-3000:]}",
        interval=0.5,
    )
    return CaPod(node, pods[0], time.monotonic() - started)


def served(metrics_text: str, method: str) -> int:
    """How many calls of `method` the server answered OK, from its /metrics."""
    return sum(
        int(sample.value)
        for family in text_string_to_metric_families(metrics_text)
        if family.name == "cloudprovider_grpc_rpc_requests"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels == {"method": method, "code": "OK"}
    )
