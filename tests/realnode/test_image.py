"""The shipped image, built from the repository's Dockerfile and run as a user runs it: read-only
root filesystem, its own uid 10001, no capabilities, `serve` answering every RPC through the
compiled front, /healthz and /readyz right, SIGTERM handled within the grace period.

The image's size and layers are printed (run with `-s` to see them)."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.realnode import image as images
from tests.support.failover import EveryRpcLoop
from tests.support.ports import free_port
from tests.support.waits import poll

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(3600)]

#: the server's default --grace-period (seconds)
GRACE_PERIOD = 10


@dataclass
class Container:
    podman: images.Podman
    name: str
    grpc_port: int
    metrics_port: int

    def inspect(self, template: str) -> str:
        return self.podman.run("inspect", "--format", template, self.name).stdout.strip()

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, ConnectionError):
            return 0

    def logs(self) -> str:
        proc = self.podman.run("logs", self.name, check=False)
        return proc.stdout + proc.stderr

    def proc_status(self) -> dict[str, str]:
        """/proc/<pid>/status of the container's first process, as the host sees it."""
        pid = self.inspect("{{.State.Pid}}")
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


@pytest.fixture
def container(built: images.Built) -> Iterator[Container]:
    """`serve` from the image, as a pod spec with the chart's securityContext runs it: the image's
    own user, every capability dropped, no privilege escalation, a read-only root filesystem with a
    writable /tmp only. The host's network (loopback addresses only) stands in for a pod's."""
    name = f"cpg-{uuid.uuid4().hex[:10]}"
    grpc_port, metrics_port = free_port(), free_port()
    built.podman.run(
        "run",
        "--detach",
        f"--name={name}",
        "--network=host",
        "--read-only",
        "--read-only-tmpfs=false",
        "--tmpfs=/tmp:rw,mode=1777,size=64m",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        built.image,
        "serve",
        f"--address=127.0.0.1:{grpc_port}",
        f"--metrics-address=127.0.0.1:{metrics_port}",
        "--nodes=1:5:pool-a",
        f"--grace-period={GRACE_PERIOD}",
    )
    box = Container(built.podman, name, grpc_port, metrics_port)
    try:
        yield box
    finally:
        built.podman.run("rm", "--force", "--time=0", name, check=False)


def test_image_runs_as_uid_10001_without_capabilities_on_a_read_only_root(container: Container) -> None:
    poll(lambda: container.status("/healthz") == 200, 120, f"/healthz to answer 200:\n{container.logs()}")
    assert container.inspect("{{.Config.User}}") == "10001:10001"
    assert container.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    status = container.proc_status()
    assert status["Uid"].split() == ["10001"] * 4, status["Uid"]
    assert status["Gid"].split() == ["10001"] * 4, status["Gid"]
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capabilities], 16) == 0, (capabilities, status[capabilities])
    assert status["NoNewPrivs"] == "1"
    # The root filesystem refuses a write the way the kubelet's readOnlyRootFilesystem does; /tmp
    # (the chart's emptyDir) takes one.
    denied = container.podman.run(
        "exec", container.name, "python", "-c", "open('/opt/venv/written', 'w')", check=False
    )
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied.stderr
    container.podman.run("exec", container.name, "python", "-c", "open('/tmp/written', 'w').write('x')")


def test_image_serves_every_rpc_through_the_compiled_front(container: Container) -> None:
    poll(lambda: container.status("/readyz") == 200, 120, f"/readyz to answer 200:\n{container.logs()}")
    assert container.status("/healthz") == 200
    processes = container.podman.run("top", container.name, "args").stdout
    assert "/opt/cloudprovider-grpc/cpg-front" in processes, processes
    loop = EveryRpcLoop(f"127.0.0.1:{container.grpc_port}", "pool-a").start()
    try:
        every = [method for method, _ in loop._requests() if method != "Cleanup"]
        poll(lambda: all(loop.calls.get(m, 0) >= 3 for m in every), 60, "three rounds of every RPC")
    finally:
        loop.stop()
    assert loop.failures() == 0, loop.failed
    for method in every:  # answered: OK, or a status of the server's own (never a transport failure)
        assert loop.answered.get(method, 0) + len(loop.other.get(method, ())) > 0, method
    assert loop.answered.get("NodeGroupNodes", 0) >= 3
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{container.metrics_port}/metrics", timeout=5).read()
    assert b'cloudprovider_grpc_rpc_requests_total{code="OK",method="NodeGroupForNode"}' in metrics


def test_image_stops_within_the_grace_period_on_sigterm(container: Container) -> None:
    poll(lambda: container.status("/readyz") == 200, 120, f"/readyz to answer 200:\n{container.logs()}")
    container.podman.run("kill", "--signal=TERM", container.name)
    # `podman wait` returns the exit code once the container stopped; past the grace period the
    # kubelet would have killed it, so that is the wait's limit.
    waited = container.podman.run("wait", container.name, timeout=GRACE_PERIOD + 5, check=False)
    assert waited.stdout.strip() == "0", (waited.stdout, waited.stderr, container.logs()[-3000:])
    assert container.inspect("{{.State.Status}}") == "exited"
