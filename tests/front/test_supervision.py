"""The compiled front as a supervised part, over real sockets and processes: a dead front is
restarted on the same port (and the server gives up, exiting 1, when it keeps dying); a front cut off
from Python turns gRPC health and /healthz NOT_SERVING and says so in the log; the private directory
is removed by whichever process outlives the other; TLS rotation needs no answer from Python; every
input gets the same status code with and without the front. benchmarks/front_supervision.py measures
the times and the front's memory."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cloudprovider_grpc.core.errors import ServerStartError
from cloudprovider_grpc.front import supervisor
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.certs import write_pki
from tests.support.front import children, gone, serve
from tests.support.ports import free_port
from tests.support.servers import channel, sim_server, stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration


def healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def health_status(ch: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def answers(ch: grpc.Channel) -> bool:
    try:
        return bool(stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=2).nodeGroups)
    except grpc.RpcError:
        return False


def test_a_killed_front_is_restarted_on_the_same_port(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with sim_server(front="on") as handle, channel(handle) as ch:
        assert handle.front is not None and answers(ch)
        first = handle.front.process.pid
        os.kill(first, signal.SIGKILL)
        poll(lambda: handle.front is not None and handle.front.process.pid != first, 10, "a new front")
        poll(lambda: answers(ch) and handle.serving, 10, "the port to serve again")
        assert health_status(ch) == health_pb2.HealthCheckResponse.SERVING
        # the new front serves the provider's current state, and caches again
        assert (
            stub(ch).NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="general"), timeout=5).targetSize
            >= 0
        )
    messages = [r.getMessage() for r in caplog.records]
    assert any("exited unexpectedly" in m for m in messages)
    assert any("was restarted (attempt 1)" in m for m in messages)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A TMPDIR for a server: short, since the private socket's path must fit a unix socket address."""
    path = Path(tempfile.mkdtemp(prefix="cpg", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_front_that_keeps_dying_makes_the_server_exit_1(short_tmp: Path) -> None:
    tmp_path = short_tmp
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = serve("--address", f"127.0.0.1:{port}", "--metrics-address", "", "--front", "on", env=env)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            poll(lambda: answers(ch), 30, "the server to serve")
            killed: set[int] = set()
            # a restart that itself fails (a front too slow to come up on a loaded machine) counts
            # as a death too, so the server may give up before the last kill: kill whatever front
            # runs until the server exits, never more often than it may restart one
            while len(killed) <= supervisor.MAX_RESTARTS:
                front = poll(
                    lambda: (
                        proc.poll() is not None
                        or [p for p in children(proc.pid) if p not in killed and not gone(p)]
                    ),
                    30,
                    "a front, or the server's exit",
                )
                if front is True:
                    break
                os.kill(front[0], signal.SIGKILL)
                killed.add(front[0])
            _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-2000:]
    # at least one restart served (under load, the first may itself be killed before it is ready)
    assert len(killed) >= 2 and "the compiled front was restarted (attempt " in err, err[-2000:]
    assert "giving up so the server can be restarted" in err
    assert not list(tmp_path.glob("cloudprovider-grpc-*"))  # Python removed the private directory


def test_a_front_cut_off_from_python_turns_health_not_serving(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with sim_server(front="on") as handle, channel(handle) as ch:
        assert handle.front is not None
        assert health_status(ch) == health_pb2.HealthCheckResponse.SERVING
        assert healthz(handle.metrics_port) == 200
        # the connection breaks and the socket cannot be reached again
        (handle.front.directory / "grpc.sock").unlink(missing_ok=True)
        handle.server.stop(0).wait(5)
        poll(lambda: health_status(ch) == health_pb2.HealthCheckResponse.NOT_SERVING, 10, "NOT_SERVING")
        poll(lambda: healthz(handle.metrics_port) == 503, 10, "/healthz to answer 503")
        # relayed calls fail at once instead of waiting out their deadline
        with pytest.raises(grpc.RpcError) as info:
            stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert any("lost its connection to the Python server" in r.getMessage() for r in caplog.records)


def test_the_private_directory_goes_with_python_after_kill_9(short_tmp: Path) -> None:
    tmp_path = short_tmp
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = serve("--address", f"127.0.0.1:{port}", "--metrics-address", "", "--front", "on", env=env)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            poll(lambda: answers(ch), 30, "the server to serve")
        assert len(list(tmp_path.glob("cloudprovider-grpc-*"))) == 1
        fronts = children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        poll(lambda: all(gone(p) for p in fronts), 10, "the front to exit")
        poll(lambda: not list(tmp_path.glob("cloudprovider-grpc-*")), 10, "the directory to be removed")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_tls_rotation_needs_no_answer_from_python(tmp_path: Path) -> None:
    """Python paused (SIGSTOP): the front loads the rotated files itself, and the next handshake after
    they change already shows the new certificate."""
    live = write_pki(tmp_path / "live")
    rotated = write_pki(tmp_path / "rotated")
    port = free_port()
    tls = ["--tls-cert", str(live.server_cert), "--tls-key", str(live.server_key), "--tls-ca", str(live.ca)]
    proc = serve("--address", f"127.0.0.1:{port}", "--metrics-address", "", "--front", "on", *tls)

    def handshake(pki) -> bool:  # a new connection each time: only the handshake matters
        creds = grpc.ssl_channel_credentials(
            root_certificates=pki.read("ca"),
            private_key=pki.read("client_key"),
            certificate_chain=pki.read("client_cert"),
        )
        with grpc.secure_channel(f"localhost:{port}", creds) as ch:
            try:
                grpc.channel_ready_future(ch).result(timeout=3)
                return True
            except grpc.FutureTimeoutError:
                return False

    try:
        poll(lambda: handshake(live), 30, "the server to serve TLS")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            for name in ("server.crt", "server.key", "ca.crt"):
                new = live.dir / f".{name}.new"
                shutil.copy(rotated.dir / name, new)
                os.replace(new, live.dir / name)
            assert handshake(rotated)
            assert not handshake(live)  # trusts only the old CA
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "TLS certificate files changed and were loaded" in err


@pytest.mark.parametrize("front", ["on", "off"])
def test_a_unary_call_without_its_message_and_oversized_metadata_get_python_s_codes(front: str) -> None:
    """What grpcio answers alone (UNIMPLEMENTED; RESOURCE_EXHAUSTED over its 16 KiB hard limit), the
    front answers too."""
    with sim_server(front=front) as handle, channel(handle) as ch:
        for path in (f"/{SERVICE_NAME}/NodeGroups", "/grpc.health.v1.Health/Check"):
            with pytest.raises(grpc.RpcError) as info:
                ch.stream_unary(path)(iter([]), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED, (path, info.value.details())
        for path in (f"/{SERVICE_NAME}/NodeGroups", f"/{SERVICE_NAME}/NodeGroupTargetSize"):
            with pytest.raises(grpc.RpcError) as info:
                ch.unary_unary(path)(b"", timeout=5, metadata=(("x-big", "a" * 20_000),))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (path, info.value.details())
        assert answers(ch)


def test_a_temporary_directory_too_deep_for_a_unix_socket_is_a_clear_start_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(ServerStartError, match="set TMPDIR to a shorter directory"), sim_server(front="on"):
        pass
    assert not list(deep.iterdir())  # nothing left behind
