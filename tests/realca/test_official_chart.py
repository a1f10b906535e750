"""The official cluster-autoscaler chart with our sidecar values, run for real (issue 16).

`helm template` renders the chart from ../shared/upstream with deploy/helm/cluster-autoscaler/sim.yaml;
then both containers of the pod are started from exactly what it rendered, outside a cluster: our
server with its container's arguments, and the real cluster-autoscaler binary of the release the
chart deploys with its container's command line and the cloud-config the pod mounts. Only what a
pod gets from its surroundings is supplied: the API server (a kubeconfig instead of the in-cluster
service account) and free ports instead of the pod's own (several runs share this machine).

This proves what README "Deploying" promises for the sidecar: CA starts with the chart's flags,
talks to our server, logs no externalgrpc error and lists the demo node groups in its status.
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path

import pytest

from tests.deploy_support.layouts import official_values_files, render_official
from tests.deploy_support.pods import ContainerView, find, flag_value
from tests.realca import builds
from tests.realca.cluster import ControlPlane, Process, env_without_proxies, wait_for
from tests.realca.kube import KubeError
from tests.support.servers import free_port

pytestmark = [pytest.mark.realca, pytest.mark.timeout(900)]

CA_IMAGE = re.compile(r"/cluster-autoscaler:v(\d+\.\d+\.\d+)$")


def test_official_chart_sidecar_runs_with_the_real_cluster_autoscaler(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    objects = render_official(official_values_files()["sim"])
    pod = find(objects, "Deployment", "cluster-autoscaler")
    ours = ContainerView(pod, "cloudprovider-grpc", objects).materialize(tmp_path / "ours")
    ca_view = ContainerView(pod, "cluster-autoscaler", objects)
    ca = ca_view.materialize(tmp_path / "ca")
    version = CA_IMAGE.search(ca_view.container["image"])
    assert version, ca_view.container["image"]

    # Our container's command (the image's ENTRYPOINT is the console script), on a free port.
    grpc_port, metrics_port = free_port(), free_port()
    assert flag_value(ours.args, "--address") == "127.0.0.1:8086", "the values' sidecar address"
    server = Process(
        "cloudprovider-grpc",
        [
            str(Path(sys.executable).parent / "cloudprovider-grpc"),
            *ours.args,
            *("--address", f"127.0.0.1:{grpc_port}", "--metrics-address", f"127.0.0.1:{metrics_port}"),
        ],
        tmp_path / "cloudprovider-grpc.log",
        {**env_without_proxies(), **ours.env},
    )
    # CA's cloud-config exactly as mounted, its address moved to the same free port.
    cloud_config = Path(flag_value(ca.args, "--cloud-config") or "")
    text = cloud_config.read_text()
    assert "address: 127.0.0.1:8086" in text, text
    cloud_config.write_text(text.replace("127.0.0.1:8086", f"127.0.0.1:{grpc_port}"))

    # CA's command line as rendered (the chart puts every flag in `command`); the binary is the
    # release of the image tag. Out of a pod it needs a kubeconfig and a free metrics port.
    assert ca.args[0] == "./cluster-autoscaler", ca.args
    argv = [
        str(builds.ca_binary(version.group(1))),
        *ca.args[1:],
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--address=127.0.0.1:{free_port()}",
    ]
    autoscaler = Process(
        "cluster-autoscaler", argv, tmp_path / "cluster-autoscaler.log", env_without_proxies()
    )

    def status() -> str:
        try:
            cm = control_plane.kube.get("/api/v1/namespaces/kube-system/configmaps/cluster-autoscaler-status")
        except KubeError:
            return ""
        return str(cm.get("data", {}).get("status", ""))

    try:
        wait_for(
            "the demo node groups in CA's status ConfigMap",
            lambda: all(group in status() for group in ("general", "highmem", "gpu")),
            timeout=240,
            watch=[server, autoscaler],
        )
        log = autoscaler.log_text()
        assert "--cloud-provider=externalgrpc" in " ".join(argv)
        errors = [line for line in log.splitlines() if line.startswith("E") and "grpc" in line.lower()]
        assert not errors, "\n".join(errors[:10])
    except BaseException:
        print(autoscaler.log_text()[-6000:], server.log_text()[-3000:], sep="\n---\n")
        raise
    finally:
        autoscaler.stop()
        server.stop()
    # Leave the shared control plane as we found it: CA's status and its leader-election lease.
    for path in (
        "/api/v1/namespaces/kube-system/configmaps/cluster-autoscaler-status",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/cluster-autoscaler",
    ):
        with contextlib.suppress(KubeError):
            control_plane.kube.delete(path)
