"""The link between the compiled front and Python (cloudprovider_grpc/front/link.py, link.go) when
something goes wrong, over real unix sockets and processes.

Python's end, talked to by a local process as the front would: a garbage, oversized or truncated frame
and an unknown method get a precise status and one warning, never a traceback, and the connection's
thread ends (nothing leaks); a peer gone mid-call costs nothing but that call.

The front's end, against a fake Python of the test's own: a peer that closes mid-call, answers with an
oversized or garbage frame, or never answers gives the caller UNAVAILABLE, RESOURCE_EXHAUSTED,
INTERNAL or DEADLINE_EXCEEDED, the front keeps serving and holds no connection per failure; a link
that closes turns health NOT_SERVING (and back when it returns)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cloudprovider_grpc.front.counters import FrontCounters
from cloudprovider_grpc.front.link import LinkServer
from cloudprovider_grpc.front.process import FrontProcess
from cloudprovider_grpc.grpcapi import rawparse
from cloudprovider_grpc.grpcapi.handlers import CACHEABLE
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.dial import Dial, dial_server
from tests.support.servers import channel, sim_server, stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration

OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNIMPLEMENTED, RESOURCE_EXHAUSTED = 0, 3, 4, 12, 8


def frame(index: int, body: bytes, timeout_ms: int = 5000) -> bytes:
    return struct.pack("<IHI", 6 + len(body), index, timeout_ms) + body


def read_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_answer(sock: socket.socket) -> tuple[int, int, str, bytes] | None:
    """(code, flags, message, body) of one answer frame, or None when the connection ended."""
    head = read_exact(sock, 4)
    if head is None:
        return None
    rest = read_exact(sock, struct.unpack("<I", head)[0])
    assert rest is not None
    code, flags, _version, text = struct.unpack_from("<BBqH", rest)
    return code, flags, rest[12 : 12 + text].decode(), rest[12 + text :]


def connect(link: LinkServer) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(link.path))
    return sock


def link_threads() -> int:
    return sum(t.name == "front-link-conn" for t in threading.enumerate())


def test_bad_frames_from_a_local_process_get_a_precise_status_and_leave_nothing_behind(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a body that does not parse is logged once a minute per process: this test's must not use up
    # another test's warning
    monkeypatch.setattr(rawparse, "MALFORMED", rawparse.MalformedLog())
    caplog.set_level(logging.WARNING)
    with sim_server(front="on") as handle, channel(handle) as ch:
        assert handle.front is not None
        link = handle.front.link
        target = link.methods.index(f"/{SERVICE_NAME}/NodeGroupTargetSize")
        baseline = poll(lambda: link.connections or None, 10, "the front's connections")
        threads = link_threads()

        # a length no request can have, and one shorter than a request header: answered, then closed
        for raw, code in (
            (b"\xff" * 64, RESOURCE_EXHAUSTED),
            (struct.pack("<I", 2) + b"ab", INVALID_ARGUMENT),
        ):
            with connect(link) as sock:
                sock.sendall(raw)
                answer = read_answer(sock)
                assert answer is not None and answer[0] == code, answer
                assert read_answer(sock) is None

        # an unknown method and a body that does not parse: answered, and the connection serves on
        with connect(link) as sock:
            sock.sendall(frame(999, b"x"))
            assert read_answer(sock) == (UNIMPLEMENTED, 0, "front link: no method 999", b"")
            sock.sendall(frame(target, b"\xff\xff\xff"))
            answer = read_answer(sock)
            assert answer is not None and answer[0] == INVALID_ARGUMENT and "not a valid" in answer[2]
            sock.sendall(frame(target, pb.NodeGroupTargetSizeRequest(id="general").SerializeToString()))
            answer = read_answer(sock)
            assert answer is not None and answer[0] == OK and answer[1] & 1  # the state version came along
            assert pb.NodeGroupTargetSizeResponse.FromString(answer[3]).targetSize >= 0

        # frames cut short by a peer that went away
        for raw in (b"\x10\x00", frame(target, b"\x0a\x07general")[:12]):
            with connect(link) as sock:
                sock.sendall(raw)

        poll(lambda: link.connections == baseline, 10, "the connections' threads to end")
        poll(lambda: link_threads() == threads, 10, "the threads to end")
        assert stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups  # still serving
    records = [r for r in caplog.records if r.name == "cloudprovider_grpc.front.link"]
    assert records and all(r.levelno == logging.WARNING and r.exc_info is None for r in records)
    assert len(records) == 1  # rate-limited: one warning, the others counted in the next one
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_caller_gone_mid_call_costs_only_that_call(caplog: pytest.LogCaptureFixture) -> None:
    dial = Dial()
    with dial_server(dial) as handle, channel(handle) as ch:
        assert handle.front is not None
        link = handle.front.link
        baseline = poll(lambda: link.connections or None, 10, "the front's connections")
        s = stub(ch)
        # a local peer that leaves while its Refresh runs: Python's answer goes nowhere, quietly
        dial.refresh_release.clear()
        with connect(link) as sock:
            sock.sendall(frame(link.methods.index(f"/{SERVICE_NAME}/Refresh"), b""))
            assert dial.refresh_entered.wait(10)
        dial.refresh_release.set()
        poll(lambda: link.connections == baseline, 10, "the connection's thread to end")

        # CA's deadline passes while Python still works: the caller hears DEADLINE_EXCEEDED at its
        # deadline, the front drops that connection, and the next calls are answered
        dial.refresh_entered.clear()
        dial.refresh_release.clear()
        with pytest.raises(grpc.RpcError) as info:
            s.Refresh(pb.RefreshRequest(), timeout=0.5)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert dial.refresh_entered.is_set()
        dial.refresh_release.set()
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g"), timeout=5).targetSize == 1
        poll(lambda: link.connections <= baseline + 1, 10, "the dropped connection's thread to end")
    # the test's cloud offers no template: the warning `serve` gives for that is not the link's
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in warnings if "no template and no machine" not in r.getMessage()], warnings


def test_a_link_closed_by_python_turns_health_not_serving(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    with sim_server(front="on") as handle, channel(handle) as ch:
        assert handle.front is not None
        health = health_pb2_grpc.HealthStub(ch)
        handle.front.link.close()

        def not_serving() -> bool:
            try:
                answer = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            except grpc.RpcError as exc:  # a check relayed in the moment before the front turned
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    return False
                raise
            return answer.status == health_pb2.HealthCheckResponse.NOT_SERVING

        poll(not_serving, 10, "NOT_SERVING")
        poll(lambda: not handle.serving, 10, "/healthz to turn 503")
        with pytest.raises(grpc.RpcError) as info:
            stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert any("lost its connection to the Python server" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- the front against a fake Python


class FakePython:
    """A link socket answering each request by the next behaviour in `script`: "ok", "close" (gone
    mid-call), "oversized" (a length over the front's limit), "garbage" (a status code that does not
    exist) or "silent" (no answer). A connection that sends nothing (the front's watch) is left open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.script: list[str] = []
        self.conns: list[socket.socket] = []
        self.ended = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):  # closed already
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):  # closed already
                conn.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while (head := read_exact(conn, 4)) is not None:
                if read_exact(conn, struct.unpack("<I", head)[0]) is None:
                    break
                behaviour = self.script.pop(0)
                if behaviour == "ok":
                    body = pb.NodeGroupsResponse(nodeGroups=[pb.NodeGroup(id="fake")]).SerializeToString()
                    conn.sendall(struct.pack("<IBBqH", 12 + len(body), 0, 0, 0, 0) + body)
                elif behaviour == "close":
                    break
                elif behaviour == "oversized":
                    conn.sendall(struct.pack("<I", 1 << 31))
                elif behaviour == "garbage":
                    conn.sendall(struct.pack("<IBBqH", 12, 200, 0, 0, 0))
                # "silent": wait for the next frame, or for the front to close the connection
        except OSError:
            pass
        finally:
            conn.close()
            self.ended += 1


@pytest.fixture
def fake(compiled_front: Path) -> Iterator[tuple[FakePython, FrontProcess, list[bool]]]:
    directory = Path(tempfile.mkdtemp(prefix="cpg", dir="/tmp"))  # short: a unix socket path
    python = FakePython(directory / "link.sock")
    events: list[bool] = []
    front = FrontProcess(
        compiled_front,
        listen="127.0.0.1:0",
        backend=directory / "grpc.sock",  # nobody there: only the link is used
        counters=FrontCounters(directory / "counters", CACHEABLE, (0.001,)),
        cacheable=[f"/{SERVICE_NAME}/{name}" for name in CACHEABLE],
        link=python.path,
        link_methods=[f"/{SERVICE_NAME}/NodeGroups"],
        link_calls=4,
        on_backend=lambda up, _message: events.append(up),
    )
    front.port = front.wait_ready()  # type: ignore[attr-defined]
    try:
        yield python, front, events
    finally:
        front.stop(0)
        python.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_the_front_gives_a_precise_status_for_every_way_python_can_fail(fake) -> None:
    python, front, _events = fake
    with grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        call = stub(ch).NodeGroups

        def outcome(behaviour: str, timeout: float = 5) -> grpc.StatusCode:
            python.script.append(behaviour)
            try:
                call(pb.NodeGroupsRequest(), timeout=timeout)
            except grpc.RpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

        assert outcome("ok") == grpc.StatusCode.OK
        fds = len(os.listdir(f"/proc/{front.pid}/fd"))
        for _ in range(5):
            assert outcome("close") == grpc.StatusCode.UNAVAILABLE
            assert outcome("oversized") == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert outcome("garbage") == grpc.StatusCode.INTERNAL
            assert outcome("silent", timeout=0.3) == grpc.StatusCode.DEADLINE_EXCEEDED
            assert outcome("ok") == grpc.StatusCode.OK
        # every failed connection was closed by the front (Python's side saw each end)
        poll(lambda: python.ended >= 20, 10, "the failed connections to end")
        assert len(os.listdir(f"/proc/{front.pid}/fd")) <= fds + 1


def test_the_front_reports_a_closed_link_and_its_return(fake) -> None:
    python, front, events = fake
    with grpc.insecure_channel(f"127.0.0.1:{front.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        # the front watches the link once it has reached it (before, Python may still be starting)
        poll(lambda: python.conns, 10, "the front's watch connection")
        python.close()
        poll(lambda: events == [False], 10, "the front to report the link down")
        answer = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as info:
            stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        python.path.unlink()
        back = FakePython(python.path)
        try:
            poll(lambda: events == [False, True], 10, "the front to report the link back")
            back.script.append("ok")
            assert [g.id for g in stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups] == [
                "fake"
            ]
        finally:
            back.close()
