"""The wiring between a layout's objects: pinned images run as the Dockerfile's user,
cluster-autoscaler on externalgrpc with flags its release defines, its cloud-config address leading
to our --address (for the sidecar a unix socket in a volume only CA's container and ours mount; for
the standalone Service, port, mutual TLS and SANs), the NetworkPolicy admitting only
cluster-autoscaler, locked-down pods and probes on the metrics port."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.deploy_support import ca_flags, dockerfile
from tests.deploy_support.layouts import NAMESPACE, OFFICIAL_CHART, ROOT, official_values_files
from tests.deploy_support.pods import ContainerView, container, find, flag_value, pod_containers, pod_spec
from tests.deploy_support.rendered import (
    CA_CONTAINER,
    CA_DEPLOYMENT,
    LAYOUTS,
    OUR_CONTAINER,
    SIDECARS,
    STANDALONES,
    ca_cloud_config,
    kube_status,
    leader_elected,
    our_args,
    our_workload,
    project_version,
    rendered,
    split_host_port,
)
from tests.deploy_support.tools import helm_template, helm_template_error

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# First cluster-autoscaler release with --cloud-provider=externalgrpc (kubernetes/autoscaler#4654).
FIRST_EXTERNALGRPC_CA = (1, 25)
CA_IMAGE_RE = re.compile(r"^registry\.k8s\.io/autoscaling/cluster-autoscaler:v(\d+)\.(\d+)\.(\d+)$")
#: Where the release workflow pushes the image; every layout defaults to it.
IMAGE = "ghcr.io/cloudprovider-grpc/cloudprovider-grpc"
#: the label the leader puts on its own pod, which the Service selects
LEADER_LABEL = "cloudprovider-grpc.io/leader"


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
def test_sidecar_dials_our_socket_in_a_volume_only_the_two_containers_mount(layout: str) -> None:
    """CA dials a unix socket (as its externalgrpc client takes `unix:///PATH`) in an emptyDir that
    CA's container and ours mount, and no other container of the pod does."""
    objects = rendered(layout)
    _, config, _ = ca_cloud_config(objects)
    assert config["address"].startswith("unix:///"), config["address"]
    assert not {"cert", "key", "cacert"} & set(config), "a socket only the two containers see needs no TLS"
    assert flag_value(our_args(objects), "--address") == config["address"], (
        "server must listen where CA dials"
    )
    socket_dir = config["address"].removeprefix("unix://").rpartition("/")[0]
    workload = our_workload(objects)
    assert workload is find(objects, "Deployment", CA_DEPLOYMENT)
    ours = container(workload, OUR_CONTAINER)
    assert ours.get("restartPolicy") == "Always", "runs as a native sidecar"
    pod = pod_spec(workload) or {}
    mounting = {
        c["name"]: m["name"]
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]
        for m in c.get("volumeMounts") or []
        if m["mountPath"] == socket_dir
    }
    assert set(mounting) == {OUR_CONTAINER, CA_CONTAINER}, mounting
    (volume_name,) = set(mounting.values())
    (volume,) = [v for v in pod["volumes"] if v["name"] == volume_name]
    assert "emptyDir" in volume, volume
    assert not any(
        m["name"] == volume_name
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]
        if c["name"] not in mounting
        for m in c.get("volumeMounts") or []
    )
    # the socket is 0660 in a directory the pod's fsGroup owns: every container of the pod has that
    # group, so CA's user may connect whatever its uid (only the mount keeps the others out)
    assert isinstance(pod["securityContext"].get("fsGroup"), int), pod["securityContext"]
    assert flag_value(our_args(objects), "--socket-mode") in (None, "0660", "0600")


@pytest.mark.parametrize("cloud", list(official_values_files()))
def test_the_official_chart_refuses_host_network_with_a_plaintext_loopback_address(
    cloud: str, tmp_path: Path
) -> None:
    """With hostNetwork: true the pod shares the node's loopback: our sidecar values render with the
    socket, and with a loopback TCP address only when CA's cloud-config has TLS."""
    values = official_values_files()[cloud]
    text = values.read_text()
    socket_line = re.compile(r"^(\s+)address: unix://\S+$", re.M)
    assert socket_line.search(text)
    on_host = ["hostNetwork=true"]
    pod = find(
        helm_template(OFFICIAL_CHART, release="ca", namespace=NAMESPACE, values=[values], set_values=on_host),
        "Deployment",
        CA_DEPLOYMENT,
    )
    assert (pod_spec(pod) or {}).get("hostNetwork") is True
    tcp = tmp_path / "tcp.yaml"
    tcp.write_text(socket_line.sub(r"\1address: 127.0.0.1:8086", text, count=1))
    refused = helm_template_error(OFFICIAL_CHART, values=[tcp], set_values=on_host)
    assert "hostNetwork: true with the plaintext loopback address 127.0.0.1:8086" in refused, refused
    helm_template(OFFICIAL_CHART, release="ca", namespace=NAMESPACE, values=[tcp])  # without hostNetwork
    tls = tmp_path / "tls.yaml"
    tls.write_text(socket_line.sub(r"\1address: 127.0.0.1:8086\n\1cacert: /certs/ca.crt", text, count=1))
    helm_template(OFFICIAL_CHART, release="ca", namespace=NAMESPACE, values=[tls], set_values=on_host)


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
