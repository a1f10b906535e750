"""A real one-node Kubernetes cluster for the realnode tier: the suite's etcd and kube-apiserver
(tests/support/controlplane.py), kube-scheduler, kube-controller-manager, kube-proxy and a kubelet
running pods on containerd and runc, on a bridge CNI network.

Addresses: the whole cluster (etcd, the apiserver, containerd and so every pod, the kubelet,
kube-proxy and its iptables rules, the scheduler and controller-manager) runs in a network
namespace of its own (tests/realnode/netns.py), which has no uplink: nothing addressed to a pod or
a Service can leave the machine, whatever the routes. Inside, everything listens on loopback or on
the node's address, which sits on a bridge this module creates (`cpgbr0`, 10.214.0.1/24) and which
the CNI bridge plugin then uses as the pods' gateway; a route there sends the ClusterIP range to
the bridge, where kube-proxy's rules take it. Pods reach the apiserver through the `kubernetes`
Service. The host shares only loopback with it: a test reaches the apiserver, a Service's
ClusterIP or a pod through `Cluster.forward`, a host 127.0.0.1 port relayed inside.

What it took on a cgroup v1/hybrid host without CAP_SYS_RESOURCE (the settings each say why):
the kubelet with `failCgroupV1: false`, cgroupfs, no QoS cgroups and no node-allocatable
enforcement; containerd's CRI with `restrict_oom_score_adj` and Debian's CNI plugins in
/usr/lib/cni; a sandbox ("pause") image built here from tests/realnode/pause.

Teardown leaves nothing behind: pods are deleted and their containers stopped through the kubelet,
then every process stops, the shims containerd started are ended by pid, every mount under the
cluster's directory and every network namespace the CRI made is removed, and the cluster's own
namespace goes, with its bridge, route and iptables rules (the host's were never touched).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization

from tests.preparation.gate import may_build
from tests.realnode.image import Podman
from tests.realnode.netns import Forwarder, Netns, forwarder, netns
from tests.support import controlplane, gotools, kubebuilds
from tests.support.certs import issue, pem, pem_key
from tests.support.controlplane import SERVICE_RANGE, ControlPlane, _process
from tests.support.ports import free_port
from tests.support.waits import poll

NODE = "realnode"
BRIDGE = "cpgbr0"
NODE_ADDRESS = "10.214.0.1"
POD_SUBNET = "10.214.0.0/24"
PAUSE_IMAGE = "localhost/cpg-pause:1"
PAUSE_SOURCE = Path(__file__).resolve().parent / "pause"
NETNS_DIR = Path("/var/run/netns")


@dataclass
class NodeNetwork:
    """The node's namespace, its address there, and the host's way in (controlplane.NodeNetwork)."""

    ns: Netns
    forwarder: Forwarder
    address: str = NODE_ADDRESS

    def command(self, cmd: Sequence[str]) -> list[str]:
        return self.ns.command(cmd)

    def forward(self, host: str, port: int) -> str:
        return self.forwarder.forward(host, port)


@dataclass
class Cluster:
    plane: ControlPlane
    workdir: Path
    binary: Path
    socket: Path
    network: NodeNetwork
    timings: dict[str, float] = field(default_factory=dict)

    def forward(self, host: str, port: int) -> str:
        """`127.0.0.1:P` on the host, relaying to `host:port` in the cluster's namespace (a
        Service's ClusterIP, a pod's IP, the node's address): the only way a test reaches them."""
        return self.network.forward(host, port)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, input=input, check=check)

    def ctr(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        cmd = ["ctr", f"--address={self.socket}", "--namespace=k8s.io", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
        return proc

    def load_image(self, podman: Podman, image: str, *tags: str) -> None:
        """`image` from podman's storage into containerd's k8s.io namespace (where the CRI looks),
        under its own name and `tags` (other references to the same image)."""
        archive = self.workdir / "image.tar"
        podman.run("save", "--format=docker-archive", "-o", str(archive), image, timeout=600)
        try:
            self.ctr("images", "import", str(archive))
        finally:
            archive.unlink(missing_ok=True)
        for tag in tags:
            self.ctr("images", "tag", "--force", image, tag)


def pause_image_name() -> str:
    return f"{PAUSE_IMAGE}-{gotools.tree_key(PAUSE_SOURCE)}"


def pause_image(podman: Podman) -> str:
    """The sandbox image: the static pause binary, FROM scratch (built once per source)."""
    key = gotools.tree_key(PAUSE_SOURCE)
    image = pause_image_name()
    if podman.exists(image):
        return image
    may_build("pause")

    def prepare(scratch: Path) -> Path:
        for name in ("go.mod", "main.go"):
            shutil.copy2(PAUSE_SOURCE / name, scratch / name)
        return scratch

    built = gotools.go_build("pause", key, prepare, ["."], env={"CGO_ENABLED": "0"})
    context = built / "context"
    context.mkdir(exist_ok=True)
    shutil.copy2(built / "pause", context / "pause")
    (context / "Containerfile").write_text('FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n')
    podman.run("build", "-t", image, str(context), timeout=300)
    return image


# ---------------------------------------------------------------- configuration files


def _containerd_config(workdir: Path, socket: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{workdir / "containerd" / "root"}"
state = "{workdir / "containerd" / "state"}"
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{workdir / "containerd" / "opt"}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here may lack CAP_SYS_RESOURCE: no negative OOM score adjustments.
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{workdir / "cni"}"
  max_conf_num = 1
"""


def _cni_config(workdir: Path) -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "cpg-realnode",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "isDefaultGateway": True,  # the pods' default route: the apiserver's Service
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_ADDRESS}]],
                        "dataDir": str(workdir / "cni-ipam"),
                    },
                }
            ],
        }
    )


def _kubelet_config(workdir: Path, files: dict[str, Path], port: int, healthz: int) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1/hybrid host, cgroupfs, and no cgroup writes a sandboxed root may be refused
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "address": NODE_ADDRESS,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "tlsCertFile": str(files["kubelet.crt"]),
        "tlsPrivateKeyFile": str(files["kubelet.key"]),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(files["ca.crt"])},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{workdir / 'containerd.sock'}",
        "clusterDomain": "cluster.local",
        "podLogsDir": str(workdir / "pod-logs"),
        "resolvConf": "",
        "registerNode": True,
        "serializeImagePulls": False,
        # a shared build machine's disk is no reason to evict the test's pods or taint the node
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": False,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "volumeStatsAggPeriod": "0s",
    }


def _kube_proxy_config(kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE,
        "clusterCIDR": POD_SUBNET,
        "bindAddress": NODE_ADDRESS,
        "healthzBindAddress": f"127.0.0.1:{free_port()}",
        "metricsBindAddress": f"127.0.0.1:{free_port()}",
        "nodePortAddresses": [f"{NODE_ADDRESS}/32"],
        # leave the host's conntrack sysctls alone
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"syncPeriod": "1s", "minSyncPeriod": "0s"},
    }


def _node_pki(workdir: Path) -> dict[str, Path]:
    """The kubelet's serving certificate (the node's address), signed by the control plane's CA."""
    ca_key = serialization.load_pem_private_key((workdir / "ca.key").read_bytes(), password=None)
    from cryptography import x509

    ca_cert = x509.load_pem_x509_certificate((workdir / "ca.crt").read_bytes())
    key, cert = issue((ca_key, ca_cert), NODE, server=True, names=(NODE_ADDRESS, NODE))  # type: ignore[arg-type]
    files = {"kubelet.crt": pem(cert), "kubelet.key": pem_key(key)}
    paths = {"ca.crt": workdir / "ca.crt"}
    for name, data in files.items():
        (workdir / name).write_bytes(data)
        paths[name] = workdir / name
    return paths


# ---------------------------------------------------------------- the node's network


def _bridge(ns: Netns) -> None:
    """The node's bridge and address in `ns`, and the route that gives a ClusterIP a way out of a
    process there (to the bridge, where kube-proxy's rules rewrite it): without one a connection
    to a Service fails before iptables sees it. Gone with the namespace."""
    ns.ip("link", "add", BRIDGE, "type", "bridge")
    ns.ip("addr", "add", f"{NODE_ADDRESS}/24", "dev", BRIDGE)
    ns.ip("link", "set", BRIDGE, "up")
    ns.ip("route", "replace", SERVICE_RANGE, "dev", BRIDGE, "src", NODE_ADDRESS)


def _netns() -> set[str]:
    return {p.name for p in NETNS_DIR.glob("cni-*")} if NETNS_DIR.is_dir() else set()


def _mounts_under(root: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(root) or point.startswith(f"{root}/"):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def _shims(socket: Path) -> list[int]:
    """Pids of the containerd shims serving our containerd (found by the socket in their command)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in cmdline:
            pids.append(int(proc.name))
    return pids


# ---------------------------------------------------------------- the cluster


def _component(
    network: NodeNetwork, binary: Path, name: str, args: Sequence[str], workdir: Path
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    return _process(network.command([str(binary), name, *args]), workdir / f"{name}.log")


def _node_ready(cluster: Cluster) -> bool:
    proc = cluster.kubectl("get", "node", NODE, "-o", "json", check=False)
    if proc.returncode != 0:
        return False
    conditions = json.loads(proc.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@contextlib.contextmanager
def cluster(workdir: Path, podman: Podman) -> Iterator[Cluster]:
    """The running one-node cluster (see the module doc), its node Ready when yielded."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    binary = kubebuilds.build_node_components()
    pause = pause_image(podman)
    timings["binaries"] = time.monotonic() - started
    workdir.mkdir(parents=True, exist_ok=True)
    netns_before = _netns()
    socket = workdir / "containerd.sock"
    (workdir / "cni").mkdir()
    (workdir / "cni" / "10-realnode.conflist").write_text(_cni_config(workdir))
    (workdir / "containerd.toml").write_text(_containerd_config(workdir, socket))
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(netns())
        network = NodeNetwork(ns, stack.enter_context(forwarder(ns)))
        stack.callback(_unmount_all, workdir, netns_before)
        _bridge(ns)
        plane = stack.enter_context(controlplane.control_plane(workdir / "plane", network))
        files = _node_pki(workdir / "plane")
        kubeconfig = plane.components_kubeconfig or plane.kubeconfig
        containerd = stack.enter_context(
            _process(
                network.command(["containerd", f"--config={workdir / 'containerd.toml'}"]),
                workdir / "containerd.log",
            )
        )
        stack.callback(_end_shims, socket)
        node = Cluster(plane, workdir, binary, socket, network, timings)
        poll(lambda: socket.exists() and node.ctr("version", check=False).returncode == 0, 60, "containerd")
        assert containerd.poll() is None
        node.load_image(podman, pause, PAUSE_IMAGE)
        control = ["--bind-address=127.0.0.1", f"--kubeconfig={kubeconfig}", "--leader-elect=false"]
        stack.enter_context(
            _component(network, binary, "kube-scheduler", [*control, f"--secure-port={free_port()}"], workdir)
        )
        stack.enter_context(
            _component(
                network,
                binary,
                "kube-controller-manager",
                [
                    *control,
                    f"--secure-port={free_port()}",
                    f"--root-ca-file={files['ca.crt']}",
                    f"--service-account-private-key-file={workdir / 'plane' / 'sa.key'}",
                    f"--service-cluster-ip-range={SERVICE_RANGE}",
                    "--controllers=*,-nodeipam",
                ],
                workdir,
            )
        )
        proxy_config = workdir / "kube-proxy.yaml"
        proxy_config.write_text(yaml.safe_dump(_kube_proxy_config(kubeconfig)))
        stack.enter_context(_component(network, binary, "kube-proxy", [f"--config={proxy_config}"], workdir))
        kubelet_config = workdir / "kubelet.yaml"
        kubelet_config.write_text(yaml.safe_dump(_kubelet_config(workdir, files, free_port(), free_port())))
        stack.enter_context(
            _component(
                network,
                binary,
                "kubelet",
                [
                    f"--config={kubelet_config}",
                    f"--kubeconfig={kubeconfig}",
                    f"--root-dir={workdir / 'kubelet'}",
                    f"--cert-dir={workdir / 'kubelet-pki'}",
                    f"--hostname-override={NODE}",
                    f"--node-ip={NODE_ADDRESS}",
                    "--v=1",
                ],
                workdir,
            )
        )
        # registered after the kubelet, so it runs before the kubelet stops: the kubelet stops the pods
        stack.callback(_drain, node)
        ready_from = time.monotonic()
        poll(lambda: _node_ready(node), 300, f"node {NODE} to be Ready", interval=0.5)
        timings["node ready"] = time.monotonic() - ready_from
        timings["cluster"] = time.monotonic() - started
        yield node


def _drain(node: Cluster) -> None:
    """Every pod deleted and its containers stopped by the kubelet (network torn down by the CRI).
    The workloads go first, orphaning their pods: a ReplicaSet still there would replace a pod
    deleted here, and the garbage collector would then delete that one with its full grace period."""
    node.kubectl(
        "delete",
        "deployments,replicasets,statefulsets,daemonsets,jobs",
        "--all",
        "-A",
        "--cascade=orphan",
        "--wait=false",
        check=False,
    )
    node.kubectl("delete", "pods", "--all", "-A", "--grace-period=1", "--wait=false", check=False)
    with contextlib.suppress(AssertionError):
        poll(
            lambda: not node.ctr("tasks", "ls", "-q", check=False).stdout.strip(),
            90,
            "containers to stop",
            interval=0.5,
        )
    for task in node.ctr("tasks", "ls", "-q", check=False).stdout.split():
        node.ctr("tasks", "kill", "--signal=SIGKILL", task, check=False)
        node.ctr("tasks", "delete", "--force", task, check=False)


def _end_shims(socket: Path) -> None:
    for pid in _shims(socket):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _unmount_all(workdir: Path, netns_before: set[str]) -> None:
    for name in sorted(_netns() - netns_before):
        subprocess.run(["umount", str(NETNS_DIR / name)], capture_output=True, check=False)
        (NETNS_DIR / name).unlink(missing_ok=True)
    for point in _mounts_under(workdir):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
