"""Our server as the real-CA runs start it: `cloudprovider-grpc serve` in its own process, mutual TLS
with the cluster PKI, on a fixed loopback port so a restart keeps CA's cloud-config valid."""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import grpc

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from tests.realca.cluster import ClusterPki, GrpcEndpoint, Process, env_without_proxies, wait_for
from tests.support.backends import BackendUnderTest
from tests.support.servers import free_port


class OurServer:
    """`cloudprovider-grpc serve` for one backend; `restart()` keeps ports, config and state file."""

    def __init__(
        self,
        backend: BackendUnderTest,
        workdir: Path,
        pki: ClusterPki,
        *,
        config: str | None = None,
        state_file: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.workdir = workdir
        self.port, self.metrics_port = free_port(), free_port()
        self.endpoint = GrpcEndpoint(f"localhost:{self.port}", pki)
        config_file = workdir / "server.yaml"
        config_file.write_text(config if config is not None else backend.e2e_config)
        self.argv = [
            sys.executable,
            "-m",
            "cloudprovider_grpc.cli",
            "serve",
            *backend.serve_args,
            "--config",
            str(config_file),
            "--address",
            f"127.0.0.1:{self.port}",
            "--metrics-address",
            f"127.0.0.1:{self.metrics_port}",
            "--tls-cert",
            str(pki.grpc_server_cert),
            "--tls-key",
            str(pki.grpc_server_key),
            "--tls-ca",
            str(pki.ca),
            "--log-level",
            "info",
            *(["--state-file", str(state_file)] if state_file else []),
            *extra_args,
        ]
        self.env = {**env_without_proxies(), **backend.extra_env}
        self.starts = 0
        self.process = self._start()

    def _start(self) -> Process:
        self.starts += 1
        proc = Process(
            f"cloudprovider-grpc-{self.starts}",
            self.argv,
            self.workdir / f"server-{self.starts}.log",
            self.env,
        )
        wait_for("our server's /healthz", self._healthy, 60, watch=[proc])
        return proc

    def _healthy(self) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=2) as resp:
            return resp.status == 200

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as a crashed or evicted pod."""
        self.process.proc.kill()
        self.process.proc.wait(10)
        self.process.stop()

    def restart(self) -> None:
        self.process = self._start()

    def stop(self) -> None:
        self.process.stop()

    def rpc_counts(self) -> dict[str, int]:
        """RPCs handled per method (all status codes), from our own metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith("cloudprovider_grpc_rpc_requests_total{"):
                method = line.split('method="', 1)[1].split('"', 1)[0]
                counts[method] = counts.get(method, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    def instances(self, group: str) -> list[pb.Instance]:
        with self.endpoint.channel() as channel:
            res = pb_grpc.CloudProviderStub(channel).NodeGroupNodes(
                pb.NodeGroupNodesRequest(id=group), timeout=5
            )
        return list(res.instances)

    def target(self, group: str) -> int:
        with self.endpoint.channel() as channel:
            stub = pb_grpc.CloudProviderStub(channel)
            return stub.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=group), timeout=5).targetSize

    def refuses_plaintext(self) -> bool:
        """A client without TLS gets no answer (the server requires client certificates)."""
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            try:
                pb_grpc.CloudProviderStub(channel).NodeGroups(pb.NodeGroupsRequest(), timeout=3)
            except grpc.RpcError as exc:
                return exc.code() == grpc.StatusCode.UNAVAILABLE
        return False
