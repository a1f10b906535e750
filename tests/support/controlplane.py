"""A real Kubernetes control plane for the tests: etcd and kube-apiserver on loopback ports.

Why real: leader election and the simulator speak to Kubernetes through its API (Leases, RBAC,
list semantics, server-side validation); a fake would test our idea of that API, not the API.
Only the two storage-and-serving processes run. No controller-manager, scheduler or kubelet:
objects are stored and served but nothing reconciles them (a deleted namespace stays Terminating,
no `default` ServiceAccount appears in a new namespace, nothing is garbage-collected, no pod ever
runs). Tests therefore isolate themselves in fresh namespaces (`ControlPlane.namespace`) and never
need to clean up.

Where the pieces come from, all cached outside the clone so only the first run on a machine pays:
- kube-apiserver: built (tests/support/kubebuilds.py) from the k8s.io/kubernetes module through
  the Go module proxy, from the tiny module in tests/controlplane (its go.mod pins the release),
  into the shared Go cache (`tests/support/gotools.py`).
- etcd: Debian's etcd-server package, unpacked with `apt-get download` + `dpkg-deb -x` (nothing is
  installed, no service is started).
- kubectl: the one on PATH, else Debian's `kubectl` package unpacked the same way.

How a test uses it (the `control_plane` fixture in tests/conftest.py, one per xdist worker):

    ns = control_plane.namespace()                       # fresh, unique
    control_plane.kubectl("apply", "-f", "-", input=manifest)
    with kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig)) as api:
        kubernetes.client.CoordinationV1Api(api).read_namespaced_lease("name", ns)

Cluster-scoped objects (nodes, priority classes) are shared by every test of the session: name them
uniquely too. A non-admin identity for RBAC tests: `control_plane.token_kubeconfig(ns, name)`
creates a ServiceAccount and returns a kubeconfig holding a token for it (`kubectl create token`);
it is granted nothing until the test binds it a Role (`kubectl(..., kubeconfig=that)` acts as it).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.support.certs import issue, make_ca, pem, pem_key
from tests.support.kubebuilds import build_apiserver, debian_package
from tests.support.ports import free_port
from tests.support.waits import poll

#: The Service ClusterIP range, and the names pods reach the apiserver by (its first address is the
#: `kubernetes` Service's).
SERVICE_RANGE = "10.96.0.0/24"
SERVICE_NAMES = ("10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
#: Deployments skip the apiserver's watch cache (a size of 0 turns it off for that resource,
#: `kube-apiserver --watch-cache-sizes`): their watches are served by etcd itself, so a watch from a
#: compacted version gets 410 Gone at once (`ControlPlane.compact`), where the cache would serve it
#: from a window of at least 75 s of recent events. Everything else is cached as in a real cluster.
WATCH_CACHE_SIZES = "deployments.apps#0"
#: Both processes start cold on a loaded 2-core machine; readiness usually takes a few seconds.
STARTUP_TIMEOUT = 180.0


class Unavailable(RuntimeError):
    """A binary could not be had (no Go, no module proxy, no apt-get): the caller skips, or fails
    under CI (`tests.deploy_support.tools.unavailable`)."""


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    etcd: Path
    kubectl: Path


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call; unlike its base class, its message carries what kubectl printed."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr or ''}{self.output or ''}".rstrip()


# ---------------------------------------------------------------- binaries


def _locate() -> Binaries:
    try:
        kubectl = shutil.which("kubectl")
        return Binaries(
            apiserver=build_apiserver(),
            etcd=debian_package("etcd-server", "control-plane") / "usr" / "bin" / "etcd",
            kubectl=Path(kubectl)
            if kubectl
            else debian_package("kubectl", "control-plane") / "usr" / "bin" / "kubectl",
        )
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(str(exc).strip() or type(exc).__name__) from exc


@functools.cache
def binaries() -> Binaries:
    """The three binaries (built or fetched by the preparation phase, only looked up in a test).
    Raises Unavailable when one cannot be had."""
    return _locate()


# ---------------------------------------------------------------- the running control plane


class NodeNetwork(Protocol):
    """Where a node's control plane runs (tests/realnode): a network namespace of the node's own,
    entered by `command`, serving at `address` there, which the host reaches only through the
    loopback address `forward` gives for an address inside."""

    address: str

    def command(self, cmd: Sequence[str]) -> list[str]: ...

    def forward(self, host: str, port: int) -> str: ...


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver pair. Tests share one per session (per xdist worker) and
    keep apart by namespace. `url` and `kubeconfig` are the host's way in; `components_kubeconfig`
    is the one for processes beside the apiserver (the same file, but for a node's control plane,
    whose components run in the node's namespace)."""

    url: str
    kubeconfig: Path
    kubectl_binary: Path = field(repr=False)
    workdir: Path = field(repr=False)
    processes: Mapping[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    components_kubeconfig: Path | None = field(default=None, repr=False)
    #: etcd's client URL (loopback, plain HTTP), for what only etcd itself can do (`compact`)
    etcd_url: str = field(default="", repr=False)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl --kubeconfig ... args` as the admin (or with `kubeconfig`); raises KubectlError
        (a CalledProcessError carrying stderr) on failure when `check`."""
        cmd = [
            str(self.kubectl_binary),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            # Discovery is cached per apiserver address: keep it with this control plane, not in ~/.kube.
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def compact(self) -> int:
        """Compacts etcd at its current revision, as the apiserver's own periodic compaction does
        (`--etcd-compaction-interval`, every 5 minutes by default), and returns that revision. A
        watch of Deployments (whose watch cache is off here, see `WATCH_CACHE_SIZES`) from an older
        version then gets 410 Gone. Through etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/compaction`,
        etcd's v3 API reference), so no etcdctl is needed."""
        if not self.etcd_url:
            raise RuntimeError("this control plane's etcd is not reachable from the host")
        header = requests.post(f"{self.etcd_url}/v3/kv/range", json={"key": "AA==", "limit": 1}, timeout=10)
        header.raise_for_status()
        revision = int(header.json()["header"]["revision"])
        done = requests.post(
            f"{self.etcd_url}/v3/kv/compaction",
            json={"revision": str(revision), "physical": True},
            timeout=30,
        )
        done.raise_for_status()
        return revision

    def namespace(self, prefix: str = "t") -> str:
        """A new namespace with a unique name, created now (never deleted: see the module doc)."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.kubectl("create", "namespace", name)
        return name

    def token_kubeconfig(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig authenticating as ServiceAccount `namespace/service_account` (created here,
        with no permissions: bind it a Role to grant some), through a token from the TokenRequest
        API, as `kubectl create token` issues it."""
        self.kubectl("create", "serviceaccount", service_account, "-n", namespace)
        token = self.kubectl("create", "token", service_account, "-n", namespace).stdout.strip()
        path = self.workdir / f"{namespace}-{service_account}.kubeconfig"
        _write_kubeconfig(path, self.url, (self.workdir / "ca.crt").read_bytes(), {"token": token})
        return path


@contextlib.contextmanager
def control_plane(workdir: Path, node: NodeNetwork | None = None) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver on free loopback ports under `workdir`, ready (`/readyz` answers
    200) when yielded, both stopped on exit. Raises Unavailable when a binary cannot be had,
    RuntimeError (with the log's tail) when a process dies or never becomes ready.

    With `node` both run inside the node's network namespace and the apiserver serves at the
    node's address there, for pods too: its certificate names that address and the `kubernetes`
    Service, which the endpoint reconciler points at it, and pods get their ServiceAccount's token
    (a controller-manager is expected to run, creating each namespace's `default` one). The host
    (kubectl, helm, the readiness check, the tests) reaches it through the node's forward, at
    127.0.0.1, which its certificate names too."""
    bins = binaries()
    workdir.mkdir(parents=True, exist_ok=True)
    node_address = node.address if node else None
    files = _write_pki(workdir, node_address)
    etcd_url = f"http://127.0.0.1:{free_port()}"
    peer_url = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    host = node_address or "127.0.0.1"
    inside = f"https://{host}:{port}"
    url = f"https://{node.forward(host, port)}" if node else inside
    enter = node.command if node else list
    etcd_cmd = [
        str(bins.etcd),
        "--name=test",
        f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls={etcd_url}",
        f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=test={peer_url}",
        "--logger=zap",
        "--log-level=warn",
    ]
    apiserver_cmd = [
        str(bins.apiserver),
        f"--etcd-servers={etcd_url}",
        f"--bind-address={host}",
        f"--advertise-address={host}",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'apiserver-certs'}",
        f"--tls-cert-file={files['server.crt']}",
        f"--tls-private-key-file={files['server.key']}",
        f"--client-ca-file={files['ca.crt']}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc",
        # Verification reads public keys only (a PKCS#8 private key there is refused).
        f"--service-account-key-file={files['sa.pub']}",
        f"--service-account-signing-key-file={files['sa.key']}",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--profiling=false",
        f"--watch-cache-sizes={WATCH_CACHE_SIZES}",
    ]
    if node_address is None:
        apiserver_cmd += [
            # The reconciler publishes the advertise address as the `kubernetes` Service's endpoint
            # and refuses a loopback one; nothing here reaches the apiserver through that Service.
            "--endpoint-reconciler-type=none",
            # Without a controller-manager no namespace ever gets its `default` ServiceAccount,
            # and this plugin would refuse every pod that names none.
            "--disable-admission-plugins=ServiceAccount",
        ]
    with contextlib.ExitStack() as stack:
        etcd = stack.enter_context(_process(enter(etcd_cmd), workdir / "etcd.log"))
        apiserver = stack.enter_context(_process(enter(apiserver_cmd), workdir / "kube-apiserver.log"))
        processes = {"etcd": etcd, "kube-apiserver": apiserver}
        admin = {
            "client-certificate-data": _b64(files["admin.crt"].read_bytes()),
            "client-key-data": _b64(files["admin.key"].read_bytes()),
        }
        ca = files["ca.crt"].read_bytes()
        kubeconfig = _write_kubeconfig(workdir / "admin.kubeconfig", url, ca, admin)
        components = kubeconfig
        if inside != url:
            components = _write_kubeconfig(workdir / "components.kubeconfig", inside, ca, admin)
        _wait_ready(url, files, processes, workdir)
        # a node's etcd listens in the node's namespace, out of the host's reach
        reachable_etcd = etcd_url if node is None else ""
        yield ControlPlane(url, kubeconfig, bins.kubectl, workdir, processes, components, reachable_etcd)


@contextlib.contextmanager
def _process(cmd: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process writing to `log`, terminated (then killed) on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(
    url: str, files: Mapping[str, Path], processes: Mapping[str, subprocess.Popen[bytes]], workdir: Path
) -> None:
    """Until /readyz answers 200; a process that dies, or a deadline passed, raises with the logs'
    tails and the checks /readyz last reported failing."""
    session = requests.Session()
    # Per request, not on the session: requests lets REQUESTS_CA_BUNDLE override session.verify.
    tls = {"verify": str(files["ca.crt"]), "cert": (str(files["admin.crt"]), str(files["admin.key"]))}
    last = ["no answer yet"]

    def tails() -> str:
        return "\n".join(
            f"--- {name}.log\n" + (workdir / f"{name}.log").read_text(errors="replace")[-3000:]
            for name in processes
        )

    def ready() -> bool:
        for name, proc in processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode} while starting:\n{tails()}")
        try:
            answer = session.get(f"{url}/readyz", params={"verbose": "1"}, timeout=5, **tls)
        except requests.RequestException as exc:
            last[0] = str(exc)
            return False
        last[0] = answer.text
        return answer.status_code == 200

    with session:
        try:
            poll(ready, STARTUP_TIMEOUT, f"kube-apiserver at {url} to answer /readyz", interval=0.2)
        except AssertionError as exc:
            failing = "\n".join(line for line in last[0].splitlines() if "[-]" in line) or last[0]
            raise RuntimeError(f"{exc}; /readyz said:\n{failing}\n{tails()}") from None


# ---------------------------------------------------------------- credentials


def _write_pki(workdir: Path, node_address: str | None = None) -> dict[str, Path]:
    """A CA, the apiserver's serving certificate (127.0.0.1, and the node's address and the names
    pods reach it by when there is a node), an admin client certificate (group system:masters:
    every permission, bypassing RBAC) and the service-account signing key with its public half."""
    ca = make_ca("control plane test CA")
    names = () if node_address is None else (node_address, *SERVICE_NAMES)
    server_key, server_cert = issue(ca, "kube-apiserver", server=True, names=names)
    admin_key, admin_cert = issue(ca, "admin", server=False, groups=("system:masters",))
    sa_key = ec.generate_private_key(ec.SECP256R1())
    contents = {
        "ca.crt": pem(ca[1]),
        "ca.key": pem_key(ca[0]),
        "server.crt": pem(server_cert),
        "server.key": pem_key(server_key),
        "admin.crt": pem(admin_cert),
        "admin.key": pem_key(admin_key),
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    paths = {}
    for name, data in contents.items():
        (workdir / name).write_bytes(data)
        paths[name] = workdir / name
    return paths


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _write_kubeconfig(path: Path, url: str, ca: bytes, user: Mapping[str, str]) -> Path:
    """A one-context kubeconfig with every credential inline, readable by kubectl and by the
    `kubernetes` Python client alike."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": "user", "user": dict(user)}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
