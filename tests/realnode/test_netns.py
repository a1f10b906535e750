"""The realnode cluster's network namespace and the forwarder into it, on real sockets: a host
loopback port reaches the address inside (not the host's own listener on the same port), bytes
pass both ways in bulk, a half-close reaches the other end, a refused target resets the client,
and the namespace goes on exit with any process left in it, as does one a killed run left."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.deploy_support.tools import unavailable
from tests.realnode import netns
from tests.support.ports import free_port
from tests.support.waits import poll

pytestmark = [pytest.mark.integration]

T = TypeVar("T")


@pytest.fixture
def ns() -> Iterator[netns.Netns]:
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
        unavailable("network namespaces", "the tests run as root with ip and nsenter")
    with netns.netns() as made:
        made.ip("link", "add", "t0", "type", "bridge")
        made.ip("addr", "add", "10.214.9.1/24", "dev", "t0")
        made.ip("link", "set", "t0", "up")
        yield made


def _inside(ns: netns.Netns, make: Callable[[], T]) -> T:
    """`make()` run on a thread that entered `ns` (a socket it creates lives there)."""
    got: list[T] = []

    def run() -> None:
        netns.enter(ns.path)
        got.append(make())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return got[0]


def _serve(listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    def run() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                handle(conn)

    threading.Thread(target=run, daemon=True).start()


def _reply(word: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(word)


def _echo_then_done(conn: socket.socket) -> None:
    """Every byte back until the client's EOF, then `done` and the server's own close."""
    while data := conn.recv(65536):
        conn.sendall(data)
    conn.sendall(b"done")


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while data := conn.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_forward_reaches_the_namespace_not_the_host(ns: netns.Netns) -> None:
    port = free_port()
    _serve(socket.create_server(("127.0.0.1", port)), _reply(b"host"))
    _serve(_inside(ns, lambda: socket.create_server(("127.0.0.1", port))), _reply(b"loopback inside"))
    _serve(_inside(ns, lambda: socket.create_server(("10.214.9.1", port))), _reply(b"node address"))
    with netns.forwarder(ns) as forwarder:
        assert forwarder.forward("127.0.0.1", port) == forwarder.forward("127.0.0.1", port)
        with _connect(forwarder.forward("127.0.0.1", port)) as conn:
            assert _read_all(conn) == b"loopback inside"
        with _connect(forwarder.forward("10.214.9.1", port)) as conn:
            assert _read_all(conn) == b"node address"
    with _connect(f"127.0.0.1:{port}") as conn:
        assert _read_all(conn) == b"host"


def test_bulk_and_half_close_pass_both_ways(ns: netns.Netns) -> None:
    port = free_port()
    _serve(_inside(ns, lambda: socket.create_server(("10.214.9.1", port))), _echo_then_done)
    payload = os.urandom(8 * 1024 * 1024)  # far more than the relay holds at once
    with netns.forwarder(ns) as forwarder, _connect(forwarder.forward("10.214.9.1", port)) as conn:
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(_read_all(conn)))
        reader.start()
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)  # the server sees EOF only if the relay passes it on
        reader.join(60)
    assert received and received[0] == payload + b"done"


def test_a_refused_target_resets_the_client(ns: netns.Netns) -> None:
    # the reset may come as early as the connect (on a loaded machine) or at the first read
    with (
        netns.forwarder(ns) as forwarder,
        pytest.raises(ConnectionResetError),
        _connect(forwarder.forward("10.214.9.1", free_port())) as conn,
    ):
        conn.sendall(b"x")
        conn.recv(1)


def test_the_namespace_goes_with_what_ran_in_it() -> None:
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
        unavailable("network namespaces", "the tests run as root with ip and nsenter")
    # as a killed run leaves one: its owner's pid gone, a process still inside
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = netns.Netns(f"{netns.PREFIX}{dead.pid}")
    subprocess.run(["ip", "netns", "add", left.name], check=True)
    sleeper = subprocess.Popen(left.command(["sleep", "600"]))
    left_inode = netns.inode(left.path)
    poll(lambda: sleeper.pid in netns.members(left_inode), 10, "the sleeper inside")
    with netns.netns() as made:
        assert not left.path.exists(), "a killed run's namespace was not removed"
        assert sleeper.wait(10) == -9
        path, inode = made.path, netns.inode(made.path)
        inner = subprocess.Popen(made.command(["sleep", "600"]))
        poll(lambda: inner.pid in netns.members(inode), 10, "a process inside")
        assert made.ip("-j", "link", "show").count('"ifname"') == 1  # loopback only
    assert not Path(path).exists()
    assert inner.wait(10) == -9 and not netns.members(inode)
