"""The compiled front (cloudprovider_grpc/front) over real sockets and processes, as it starts and
stops: shutdown through the front and its grace period, Ctrl-C and kill -9 of the process, the
`--front` modes selecting the path that serves, and its sources kept gofmt and go vet clean. What
it answers while serving is in test_front_cache.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.front import binary
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.server.assembly import start_server
from tests.support.dial import Dial, target, wait_until
from tests.support.front import children, gone, serve
from tests.support.ports import free_port
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration


def test_shutdown_through_the_front() -> None:
    """In-flight calls finish, later ones answer UNAVAILABLE (never from the cache), Watch streams
    end cleanly, and the front's process and port are gone afterwards."""
    dial = Dial()
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address="", front="on"), provider=dial)
    assert handle.front is not None
    front_proc = handle.front.process.proc
    ch = channel(handle)
    s = stub(ch)
    assert target(s) == 1 and target(s) == 1  # cached now
    watch_seen: list[int] = []
    watch_end: dict[str, object] = {}

    def watch() -> None:
        try:
            for resp in health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=30):
                watch_seen.append(resp.status)
            watch_end["ok"] = True
        except grpc.RpcError as exc:
            watch_end["error"] = exc.code()

    watcher = threading.Thread(target=watch)
    watcher.start()
    wait_until("the Watch stream to start", lambda: bool(watch_seen))
    dial.refresh_release.clear()
    dial.refresh_entered.clear()
    refreshed: dict[str, object] = {}

    def refresh() -> None:
        try:
            s.Refresh(pb.RefreshRequest(), timeout=30)
            refreshed["ok"] = True
        except grpc.RpcError as exc:
            refreshed["error"] = exc.code()

    in_flight = threading.Thread(target=refresh)
    in_flight.start()
    assert dial.refresh_entered.wait(10)
    stopper = threading.Thread(target=handle.stop, kwargs={"grace": 20})
    stopper.start()
    wait_until("shutdown to begin", lambda: not handle.gate._open)
    with pytest.raises(grpc.RpcError) as info:
        target(s)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (info.value.details() or "")
    dial.refresh_release.set()
    in_flight.join(20)
    stopper.join(30)
    watcher.join(30)
    assert refreshed == {"ok": True}
    assert watch_end == {"ok": True}
    assert watch_seen[0] == health_pb2.HealthCheckResponse.SERVING
    assert handle.wait(0)
    assert front_proc.poll() is not None
    with pytest.raises(grpc.RpcError) as info:
        target(s)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    ch.close()


def test_the_grace_period_bounds_the_stop() -> None:
    dial = Dial()
    handle = start_server(Settings(address="127.0.0.1:0", metrics_address="", front="on"), provider=dial)
    assert handle.front is not None
    ch = channel(handle)
    dial.refresh_release.clear()
    call = stub(ch).Refresh.future(pb.RefreshRequest(), timeout=60)
    assert dial.refresh_entered.wait(10)
    stopper = threading.Thread(target=handle.stop, kwargs={"grace": 1})
    stopper.start()
    stopper.join(30)
    try:
        assert not stopper.is_alive()  # the stop did not wait for the stuck call
        assert handle.front.process.proc.poll() is not None
        with pytest.raises(grpc.RpcError):
            call.result(timeout=30)
    finally:
        dial.refresh_release.set()
        ch.close()


def port_free(port: int) -> bool:
    """A new server could listen on the port now (SO_REUSEADDR, as grpcio and grpc-go set it: the
    killed front's closed connections may linger in TIME_WAIT)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_serving(port: int, proc: subprocess.Popen[str]) -> None:
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(ch).result(timeout=30)
        stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
    finally:
        ch.close()
    assert proc.poll() is None


def test_ctrl_c_to_the_process_group_is_a_graceful_stop_led_by_python() -> None:
    port = free_port()
    proc = serve("--address", f"127.0.0.1:{port}", "--metrics-address", "", "--front", "on")
    try:
        wait_serving(port, proc)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the front gets it too
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert "received SIGINT, shutting down" in err and "server stopped" in err
    assert "exited unexpectedly" not in err


def test_kill_9_of_the_python_process_takes_the_front_down_and_frees_the_port() -> None:
    port = free_port()
    proc = serve("--address", f"127.0.0.1:{port}", "--metrics-address", "", "--front", "on")
    try:
        wait_serving(port, proc)
        fronts = children(proc.pid)
        assert len(fronts) == 1, fronts
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        wait_until("the front to exit", lambda: gone(fronts[0]))
        wait_until("the port to be free", lambda: port_free(port))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize(
    ("mode", "cache", "line"),
    [
        ("auto", "built", "front: compiled"),
        ("off", "built", "front: python"),
        ("auto", "empty", "front: python"),
    ],
)
def test_front_modes_choose_the_path_that_serves(tmp_path: Path, mode: str, cache: str, line: str) -> None:
    env = {**os.environ, "EXAMPLE_API_TOKEN": "front-must-not-see-this"}
    if cache == "empty":  # a machine where the front was never built
        env["XDG_CACHE_HOME"] = str(tmp_path)
    port = free_port()
    proc = serve("--address", f"127.0.0.1:{port}", "--metrics-address", "", "--front", mode, env=env)
    try:
        wait_serving(port, proc)
        fronts = children(proc.pid)
        has_front = bool(fronts)
        for pid in fronts:  # the front gets no environment: no credential reaches its /proc
            assert Path(f"/proc/{pid}/environ").read_bytes() == b""
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert line in err
    assert has_front == (line == "front: compiled")
    if cache == "empty":  # the optional build is not news on every start (debug only)
        assert "build-front" not in err and "compiled front not used" not in err


def test_front_on_without_a_binary_refuses_to_start(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    proc = serve("--address", f"127.0.0.1:{free_port()}", "--front", "on", env=env)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        "cloudprovider-grpc: invalid configuration: front: on, but no compiled front built for this "
        "version (run `cloudprovider-grpc build-front`)"
    ]


@pytest.mark.slow
def test_the_front_sources_are_gofmt_and_go_vet_clean() -> None:
    go = binary.go_binary()
    assert go is not None  # the front was built, so Go is here
    fmt = subprocess.run(
        [str(Path(go).with_name("gofmt")), "-l", "."], cwd=binary.SOURCE_DIR, capture_output=True, text=True
    )
    assert fmt.returncode == 0 and fmt.stdout == "", fmt.stdout + fmt.stderr
    vet = subprocess.run(
        [go, "vet", "."], cwd=binary.SOURCE_DIR, env=binary.go_env(), capture_output=True, text=True
    )
    assert vet.returncode == 0, vet.stdout + vet.stderr
