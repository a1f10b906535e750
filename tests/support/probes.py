"""A real `cloudprovider-grpc serve` process for the probes (tests/probes/) and benchmarks/robustness.py.

Each server is its own process on loopback ports, with stdout and stderr captured to files, so a probe
can read its memory (/proc), scan everything it printed, kill it with SIGKILL or SIGTERM, and restart it
on the same journal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.support.backends import BackendUnderTest
from tests.support.clouds import ExternalCloud
from tests.support.ports import free_port
from tests.support.waits import instances, poll, refresh


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    out_path: Path
    err_path: Path
    _channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def channel(self) -> grpc.Channel:
        ch = grpc.insecure_channel(self.address)
        self._channels.append(ch)
        return ch

    def stub(self) -> pb_grpc.CloudProviderStub:
        return pb_grpc.CloudProviderStub(self.channel())

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")

    def front_rss_bytes(self) -> int:
        """The compiled front's RSS (the server's child processes), 0 when Python serves alone."""
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                children = (task / "children").read_text().split()
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
            for pid in children:
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except FileNotFoundError:
                    continue
                total += next(int(x.split()[1]) * 1024 for x in status.splitlines() if x.startswith("VmRSS:"))
        return total

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def output(self) -> str:
        """Everything the process printed so far, stdout and stderr."""
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        for ch in self._channels:
            ch.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def serve_command(
    backend: BackendUnderTest, cloud: ExternalCloud | None, extra: Iterable[str] = ()
) -> list[str]:
    args = cloud.serve_args if cloud is not None else backend.serve_args
    return [sys.executable, "-m", "cloudprovider_grpc", "serve", *args, *extra]


def start_server(
    backend: BackendUnderTest,
    workdir: Path,
    *,
    cloud: ExternalCloud | None = None,
    extra: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    name: str = "server",
    wait_ready: bool = True,
    cwd: Path | None = None,
) -> ServerProcess:
    """Start `serve` for `backend` (against `cloud` when given, else its bundled emulator) on free
    loopback ports and wait until /healthz answers."""
    port, mport = free_port(), free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    full_env.update(backend.extra_env)
    if cloud is not None:
        full_env.update(cloud.env)
    full_env.update(env or {})
    command = serve_command(
        backend,
        cloud,
        ["--address", f"127.0.0.1:{port}", "--metrics-address", f"127.0.0.1:{mport}", *extra],
    )
    with out_path.open("ab") as out, err_path.open("ab") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, env=full_env, cwd=cwd)
    server = ServerProcess(proc, port, mport, out_path, err_path)
    if wait_ready:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}:\n{server.output()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except (urllib.error.URLError, ConnectionError):
                return False

        try:
            poll(ready, 60, f"{backend.name} server to become ready")
        except BaseException:
            server.close()
            raise
    return server


# ---------------------------------------------------------------- CA-side helpers


def is_placeholder(instance_id: str) -> bool:
    return "pending-" in instance_id


#: seconds between Refresh calls while waiting: CA refreshes every 10 s; much faster polling would use
#: up a cloud's request budget (Cherry: 4/s) that background creates share, and starve them
REFRESH_EVERY = 1.0


def settle(s: pb_grpc.CloudProviderStub, gid: str, size: int, timeout: float = 60) -> list[str]:
    """Refresh until `gid` has exactly `size` instances, all with cloud ids and none failed or being
    deleted; return their ids."""

    seen: list[pb.Instance] = []

    def done() -> list[str] | None:
        refresh(s)
        got = instances(s, gid)
        seen[:] = got
        ok = len(got) == size and all(
            not is_placeholder(i.id)
            and i.status.instanceState
            in (pb.InstanceStatus.instanceRunning, pb.InstanceStatus.instanceCreating)
            and not i.status.HasField("errorInfo")
            for i in got
        )
        return sorted(i.id for i in got) if ok else None

    if size == 0:
        poll(lambda: refresh(s) and not instances(s, gid), timeout, f"{gid} to be empty", REFRESH_EVERY)
        return []
    try:
        return poll(done, timeout, f"{gid} to settle at {size} machines", REFRESH_EVERY)
    except AssertionError as exc:
        last = [(i.id, i.status.instanceState, i.status.errorInfo.errorMessage) for i in seen]
        raise AssertionError(f"{exc}; last seen: {last}") from None


def stop_gracefully(server: ServerProcess, timeout: float = 30) -> int:
    server.signal(signal.SIGTERM)
    return server.wait(timeout)


# ------------------------------------------------------ the fault round (test_faults, robustness.py)


@dataclass
class FaultRound:
    """What a fault round ended with. `held`: the ids the cloud holds (as `ExternalCloud.machines`);
    `seen`: the same for the machines CA sees; `total`: CA's instances, placeholders included."""

    base: int
    victims: list[str]
    held: list[str]
    seen: list[str]
    total: int
    faults: int


def steady(s: pb_grpc.CloudProviderStub, cloud: ExternalCloud, gid: str, total: int, timeout: float) -> None:
    """Refresh until CA sees `total` instances, its machines are exactly the cloud's (and all of them,
    no placeholder left, where creates are idempotent), unchanged over three Refreshes: nothing is in
    flight any more. A cloud whose create carries no token may keep placeholders for creates whose
    answer was lost: never re-sent, they wait for their machine or `failed_ttl` (then CA asks again)."""
    seen: list[tuple[int, list[str], list[str]]] = []

    def check() -> bool:
        refresh(s)
        got = instances(s, gid)
        real = sorted(i.id.rsplit("/", 1)[-1] for i in got if not is_placeholder(i.id))
        seen.append((len(got), real, sorted(cloud.machines(gid))))
        n, real, held = seen[-1]
        ok = n == total and real == held and (len(held) == total or not cloud.idempotent_creates)
        return ok and len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    try:
        poll(check, timeout, f"{gid} to hold {total} steadily", REFRESH_EVERY)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen (count, CA's, cloud's): {seen[-1:]}") from None


def fault_round(
    s: pb_grpc.CloudProviderStub, cloud: ExternalCloud, gid: str, *, rate: float, seed: int, timeout: float
) -> FaultRound:
    """CA grows `gid` by 3, 2 and 1 (one loop each) and deletes 2 of its machines while `rate` of the
    cloud's requests fail; faults stop only once both have settled. A create executed although its
    answer was lost may exist twice for a moment (same creation token): the machinery deletes the
    younger one, so the cloud converges."""
    base = len(cloud.machines(gid))
    cloud.set_faults(rate, seed=seed)
    for delta in (3, 2, 1):
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id=gid, delta=delta), timeout=5)
        refresh(s)
    steady(s, cloud, gid, base + 6, timeout)
    victims = sorted(i.id for i in instances(s, gid) if not is_placeholder(i.id))[:2]
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(
            id=gid, nodes=[pb.ExternalGrpcNode(providerID=v, name=v) for v in victims]
        ),
        timeout=5,
    )
    gone = {v.rsplit("/", 1)[-1] for v in victims}
    poll(
        lambda: refresh(s) and not gone & set(cloud.machines(gid)),
        timeout,
        f"{', '.join(victims)} to be deleted under faults",
        REFRESH_EVERY,
    )
    cloud.set_faults(0)
    steady(s, cloud, gid, base + 4, timeout)
    got = instances(s, gid)
    return FaultRound(
        base=base,
        victims=[v.rsplit("/", 1)[-1] for v in victims],
        held=sorted(cloud.machines(gid)),
        seen=sorted(i.id.rsplit("/", 1)[-1] for i in got if not is_placeholder(i.id)),
        total=len(got),
        faults=cloud.faults_injected(),
    )
