"""A real control plane on loopback (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)
and the registrar that stands in for kubelets.

Facts this relies on (learned against kube-apiserver 1.36):
- the `TaintNodesByCondition` admission plugin taints every new Node `node.kubernetes.io/not-ready:
  NoSchedule`; with no kubelet and no node-lifecycle controller nothing removes it and CA treats the
  node as unready, so the plugin is disabled (and the registrar strips the taint if it appears);
- without a kubelet a pod deleted gracefully (CA's drain evicts pods) keeps its deletionTimestamp
  forever, so the registrar finishes the deletion as a kubelet would;
- the controller-manager runs only the controllers the scenarios need (deployments, replica sets,
  garbage collection, pod GC, namespaces, service accounts); node lifecycle is the registrar's job.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.realca import builds
from tests.realca.kube import JSON, Kube, KubeCredentials, KubeError
from tests.support.servers import free_port

log = logging.getLogger(__name__)

REGISTRAR_LABEL = "realca.cloudprovider-grpc.io/registrar"


# ---------------------------------------------------------------- processes


class Process:
    """A child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(
        self, name: str, argv: Sequence[str], logfile: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.logfile = logfile
        self._out = open(logfile, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            self.argv, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        return self.logfile.read_text(errors="replace")

    def stop(self, grace: float = 10) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()


def wait_for(what: str, check: Callable[[], bool], timeout: float, *, watch: Sequence[Process] = ()) -> None:
    """Poll `check` until it holds; fail early when a watched process died."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        for proc in watch:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n{proc.log_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)


# ---------------------------------------------------------------- PKI


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class ClusterPki:
    """One CA for everything on loopback: the API server's serving certificate, the admin client
    certificate (group system:masters, used by every component and by CA), our gRPC server's
    certificate (localhost, as CA dials `localhost:PORT`) and CA's client certificate for it."""

    dir: Path
    ca: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    grpc_server_cert: Path
    grpc_server_key: Path
    grpc_client_cert: Path
    grpc_client_key: Path

    @classmethod
    def create(cls, directory: Path) -> ClusterPki:
        directory.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        ca_key = _key()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "realca test CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        (directory / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

        def issue(stem: str, cn: str, *, org: str | None = None, server: bool) -> None:
            key = _key()
            attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
            if org:
                attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
            builder = (
                x509.CertificateBuilder()
                .subject_name(x509.Name(attrs))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=1))
                .add_extension(
                    x509.ExtendedKeyUsage(
                        [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                    ),
                    critical=False,
                )
            )
            if server:
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.DNSName("localhost"),
                            x509.DNSName("kubernetes.default.svc"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                            x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
                        ]
                    ),
                    critical=False,
                )
            cert = builder.sign(ca_key, hashes.SHA256())
            (directory / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            _write_key(directory / f"{stem}.key", key)

        issue("apiserver", "kube-apiserver", server=True)
        issue("admin", "realca-admin", org="system:masters", server=False)
        issue("grpc-server", "localhost", server=True)
        issue("grpc-client", "cluster-autoscaler", server=False)
        sa = _write_key(directory / "sa.key", _key())
        (directory / "sa.pub").write_bytes(
            serialization.load_pem_private_key(sa.read_bytes(), None)
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        d = directory
        return cls(
            d,
            d / "ca.crt",
            d / "apiserver.crt",
            d / "apiserver.key",
            d / "admin.crt",
            d / "admin.key",
            d / "sa.key",
            d / "grpc-server.crt",
            d / "grpc-server.key",
            d / "grpc-client.crt",
            d / "grpc-client.key",
        )


# ---------------------------------------------------------------- control plane


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager on loopback."""

    workdir: Path
    pki: ClusterPki
    creds: KubeCredentials
    kubeconfig: Path
    processes: list[Process] = field(default_factory=list)

    @property
    def kube(self) -> Kube:
        return Kube(self.creds)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_text()[-3000:]}" for p in self.processes)


def start_control_plane(workdir: Path, *, timeout: float = 300) -> ControlPlane:
    """Start the control plane (building or fetching its binaries first, cached) and wait until the
    API server is ready and the default namespace and service account exist."""
    bins = builds.control_plane()
    etcd = builds.etcd()
    workdir.mkdir(parents=True, exist_ok=True)
    pki = ClusterPki.create(workdir / "pki")
    api_port = free_port()
    creds = KubeCredentials(f"https://127.0.0.1:{api_port}", pki.ca, pki.admin_cert, pki.admin_key)
    kubeconfig = creds.kubeconfig(workdir / "admin.kubeconfig")
    plane = ControlPlane(workdir, pki, creds, kubeconfig)
    try:
        client, peer = free_port(), free_port()
        etcd_proc = Process(
            "etcd",
            [
                str(etcd),
                "--name=realca",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=realca=http://127.0.0.1:{peer}",
                "--log-level=warn",
            ],
            workdir / "etcd.log",
        )
        plane.processes.append(etcd_proc)
        apiserver = Process(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki.apiserver_cert}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca}",
                f"--service-account-key-file={pki.dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/24",
                # the `kubernetes` Service's endpoint cannot be a loopback address; nothing here needs it
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
                # see the module docstring: no not-ready taint, no token volumes (no kubelet mounts them)
                "--disable-admission-plugins=TaintNodesByCondition,ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--v=1",
            ],
            workdir / "kube-apiserver.log",
        )
        plane.processes.append(apiserver)
        kube = plane.kube
        try:
            wait_for(
                "kube-apiserver /readyz",
                lambda: kube.raw("GET", "/readyz") == "ok",
                timeout,
                watch=[etcd_proc, apiserver],
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; /readyz?verbose: {_readyz(kube)}") from None
        common = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--v=1",
        ]
        plane.processes.append(
            Process(
                "kube-scheduler",
                [str(bins / "kube-scheduler"), *common, f"--secure-port={free_port()}"],
                workdir / "kube-scheduler.log",
            )
        )
        plane.processes.append(
            Process(
                "kube-controller-manager",
                [
                    str(bins / "kube-controller-manager"),
                    *common,
                    f"--secure-port={free_port()}",
                    "--controllers=deployment,replicaset,garbagecollector,podgc,namespace,serviceaccount",
                    "--concurrent-deployment-syncs=2",
                    "--concurrent-replicaset-syncs=2",
                ],
                workdir / "kube-controller-manager.log",
            )
        )
        wait_for(
            "the default service account",
            lambda: bool(kube.get("/api/v1/namespaces/default/serviceaccounts/default")),
            timeout,
            watch=plane.processes,
        )
    except BaseException:
        plane.stop()
        raise
    return plane


def _readyz(kube: Kube) -> str:
    try:
        return kube.raw("GET", "/readyz?verbose")
    except KubeError as exc:
        return str(exc)
    except OSError as exc:
        return repr(exc)


# ---------------------------------------------------------------- our server


@dataclass
class GrpcEndpoint:
    """How the harness (and CA) reach our gRPC server: address and CA's client certificate."""

    address: str  # localhost:PORT
    pki: ClusterPki

    def channel(self) -> grpc.Channel:
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.pki.ca.read_bytes(),
            private_key=self.pki.grpc_client_key.read_bytes(),
            certificate_chain=self.pki.grpc_client_cert.read_bytes(),
        )
        return grpc.secure_channel(self.address, creds)

    def cloud_config(self, path: Path) -> Path:
        """CA's externalgrpc cloud-config for this server (mutual TLS)."""
        path.write_text(
            f'address: "{self.address}"\n'
            f'cert: "{self.pki.grpc_client_cert}"\n'
            f'key: "{self.pki.grpc_client_key}"\n'
            f'cacert: "{self.pki.ca}"\n'
            "grpc_timeout: 5s\n"
        )
        return path


# ---------------------------------------------------------------- the registrar


def node_name(instance_id: str) -> str:
    """A DNS-1123 Node name for a cloud instance id (`sim://general/3` -> `sim-general-3`)."""
    name = re.sub(r"[^a-z0-9]+", "-", instance_id.lower()).strip("-")
    return name[:63].rstrip("-") or "node"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Registrar:
    """Stands in for the kubelets of the machines our server runs.

    Every `interval` it reads our server's node groups and instances over gRPC (as CA does) and
    keeps one Node per running instance: name from the instance id, `spec.providerID` = the instance
    id exactly, capacity, allocatable, labels and taints from the group's template, Ready with
    heartbeats. A Node whose instance is gone or being deleted is removed. Pods bound to our Nodes
    are marked Running, and pods being deleted on them are finished off."""

    def __init__(
        self, kube: Kube, endpoint: GrpcEndpoint, *, interval: float = 0.5, heartbeat: float = 10
    ) -> None:
        self.kube = kube
        self.endpoint = endpoint
        self.interval = interval
        self.heartbeat = heartbeat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)
        self._templates: dict[str, JSON] = {}
        self._beats: dict[str, float] = {}
        self.errors: list[str] = []
        #: node name -> (instance id, group id), for every Node the registrar created
        self.created: dict[str, tuple[str, str]] = {}

    def start(self) -> Registrar:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        channel: grpc.Channel | None = None
        while not self._stop.is_set():
            try:
                if channel is None:
                    channel = self.endpoint.channel()
                self.sync(pb_grpc.CloudProviderStub(channel))
            except grpc.RpcError as exc:
                # our server restarting (a scenario does that): reconnect on the next round
                self.errors.append(f"gRPC: {exc.code()}")
                if channel is not None:
                    channel.close()
                channel = None
            except Exception as exc:
                self.errors.append(repr(exc))
                log.warning("registrar round failed: %r", exc)
            self._stop.wait(self.interval)
        if channel is not None:
            channel.close()

    def _template(self, stub: pb_grpc.CloudProviderStub, group: str) -> JSON:
        if group not in self._templates:
            res = stub.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id=group), timeout=5)
            node = decode_node(res.nodeBytes)
            self._templates[group] = {
                "labels": dict(node.metadata.labels),
                "taints": [
                    {"key": t.key, "value": t.value, "effect": t.effect}
                    for t in node.spec.taints
                    if t.key != "node.kubernetes.io/not-ready"
                ],
                "capacity": {k: q.string for k, q in node.status.capacity.items()},
                "allocatable": {k: q.string for k, q in node.status.allocatable.items()},
            }
        return self._templates[group]

    def running_instances(self, stub: pb_grpc.CloudProviderStub) -> dict[str, str]:
        """instance id -> group id, for instances in state running."""
        out: dict[str, str] = {}
        for group in stub.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups:
            res = stub.NodeGroupNodes(pb.NodeGroupNodesRequest(id=group.id), timeout=5)
            for inst in res.instances:
                if inst.status.instanceState == pb.InstanceStatus.instanceRunning:
                    out[inst.id] = group.id
        return out

    def sync(self, stub: pb_grpc.CloudProviderStub) -> None:
        running = self.running_instances(stub)
        ours = {
            n["metadata"]["name"]: n
            for n in self.kube.items("/api/v1/nodes", labelSelector=f"{REGISTRAR_LABEL}=true")
        }
        wanted = {node_name(iid): (iid, group) for iid, group in running.items()}
        for name, node in ours.items():
            if name not in wanted or node["spec"].get("providerID") != wanted[name][0]:
                self.kube.delete(f"/api/v1/nodes/{name}")
                self._beats.pop(name, None)
        now = time.monotonic()
        for name, (iid, group) in wanted.items():
            if name not in ours:
                self._register(name, iid, self._template(stub, group))
                self.created[name] = (iid, group)
            elif now - self._beats.get(name, 0) >= self.heartbeat:
                self._set_status(name, self._template(stub, group))
            else:
                taints = ours[name]["spec"].get("taints") or []
                if any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints):
                    kept = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
                    self.kube.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": kept}})
        self._pods(set(wanted))

    def _register(self, name: str, instance_id: str, template: JSON) -> None:
        labels = {**template["labels"], "kubernetes.io/hostname": name, REGISTRAR_LABEL: "true"}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": instance_id, "taints": template["taints"]},
        }
        try:
            self.kube.create("/api/v1/nodes", body)
        except KubeError as exc:
            if exc.status != 409:
                raise
        self._set_status(name, template)

    def _set_status(self, name: str, template: JSON) -> None:
        stamp = _now()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "registrar stands in for the kubelet",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        status = {
            "capacity": template["capacity"],
            "allocatable": template["allocatable"],
            "conditions": [ready],
            "addresses": [{"type": "Hostname", "address": name}],
        }
        self.kube.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status})
        self._beats[name] = time.monotonic()

    def _pods(self, nodes: set[str]) -> None:
        for pod in self.kube.items("/api/v1/pods"):
            meta, spec = pod["metadata"], pod["spec"]
            where = spec.get("nodeName")
            if not where:
                continue
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if meta.get("deletionTimestamp") or where not in nodes:
                # what the kubelet (or the pod GC, for a vanished node) would finish
                self.kube.delete(path, grace_seconds=0)
            elif pod.get("status", {}).get("phase") == "Pending":
                stamp = _now()
                conditions = [
                    {"type": t, "status": "True", "lastTransitionTime": stamp}
                    for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                ]
                self.kube.merge_patch(
                    path + "/status",
                    {
                        "status": {
                            "phase": "Running",
                            "conditions": conditions,
                            "startTime": stamp,
                            "podIP": "10.0.0.1",
                        }
                    },
                )


@contextlib.contextmanager
def registrar(kube: Kube, endpoint: GrpcEndpoint) -> Iterator[Registrar]:
    reg = Registrar(kube, endpoint).start()
    try:
        yield reg
    finally:
        reg.stop()


def env_without_proxies() -> dict[str, str]:
    """The environment for loopback processes: no proxy may intercept 127.0.0.1."""
    env = dict(os.environ)
    for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(key, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env
