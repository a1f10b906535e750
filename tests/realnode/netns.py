"""The realnode cluster's network namespace, and the loopback forwarder the host's tests reach it by.

Why a namespace: the node's bridge and address, its pods and kube-proxy's rules then live where no
route leads off the machine (the namespace has no uplink at all), so no packet for a 10.x address
can leave it, whatever routes exist or are missing at any moment. Loopback is the one address the
host shares with it, through `Forwarder`: listeners on the host's 127.0.0.1, each relaying to one
address inside.

Processes enter it with `nsenter --net=...` (`Netns.command`), not `ip netns exec`: the latter
also gives each process a private mount namespace, and the kubelet's volume mounts must be seen by
containerd and runc.

Sockets keep the namespace they were created in, and setns(2) on a thread moves that thread alone
(setns(2), CLONE_NEWNET): the forwarder's listeners are made by the caller, on the host, and its
thread then enters the namespace, so every connection it opens starts inside.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: setns(2)'s namespace type for a network namespace (linux/sched.h)
CLONE_NEWNET = 0x40000000
#: where `ip netns add` keeps its namespaces (bind mounts of them)
RUN_NETNS = Path("/run/netns")
PREFIX = "cpg-realnode-"
#: bytes a relay reads at once, and so holds per direction before the other side has taken them
CHUNK = 64 * 1024
CONNECT_TIMEOUT = 10.0


def _ip(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def inode(path: Path) -> int:
    """The namespace's identity: the inode its file (or a process's /proc/PID/ns/net) names."""
    return os.stat(path).st_ino


def members(ns_inode: int) -> list[int]:
    """Pids of the processes whose network namespace is `ns_inode`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(proc / "ns" / "net").st_ino == ns_inode:
                    pids.append(int(proc.name))
    return pids


def _remove(name: str) -> None:
    """Namespace `name` deleted, every process still in it killed first (so it is really gone)."""
    path = RUN_NETNS / name
    with contextlib.suppress(OSError):
        for pid in members(inode(path)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def enter(ns: Path) -> None:
    """The calling thread moved into network namespace `ns` (setns(2); Python has no os.setns
    before 3.12): sockets it creates from now on are made there. Other threads stay where they are."""
    fd = os.open(ns, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
    finally:
        os.close(fd)


def _leftovers() -> list[str]:
    """Namespaces of this module whose run is gone (a killed session): their owner pid is dead."""
    found = []
    for path in RUN_NETNS.glob(f"{PREFIX}*") if RUN_NETNS.is_dir() else []:
        pid = path.name.removeprefix(PREFIX)
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            found.append(path.name)
    return found


@dataclass
class Netns:
    name: str

    @property
    def path(self) -> Path:
        return RUN_NETNS / self.name

    def command(self, cmd: Sequence[str]) -> list[str]:
        """`cmd` run inside the namespace (the network one only: mounts stay the host's)."""
        return ["nsenter", f"--net={self.path}", "--", *cmd]

    def ip(self, *args: str, check: bool = True) -> str:
        return _ip("-n", self.name, *args, check=check)


@contextlib.contextmanager
def netns() -> Iterator[Netns]:
    """A new network namespace with its loopback up, named for this process; removed on exit, with
    any process left in it. A namespace a killed earlier run left is removed first."""
    for name in _leftovers():
        _remove(name)
    made = Netns(f"{PREFIX}{os.getpid()}")
    if made.path.exists():
        _remove(made.name)
    _ip("netns", "add", made.name)
    try:
        made.ip("link", "set", "lo", "up")
        yield made
    finally:
        _remove(made.name)


class Forwarder:
    """Host loopback listeners, each relaying every connection to one address inside a namespace,
    on one thread (asyncio) that lives in that namespace. Each direction of a connection holds at
    most CHUNK bytes the other side has not taken (reads wait on the writer's drain); an end's EOF
    is passed on as a half-close; a target that refuses or fails resets the client's connection."""

    def __init__(self, ns: Path) -> None:
        self.ns = ns
        self._targets: dict[tuple[str, int], str] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        self._thread: threading.Thread | None = None

    def start(self) -> Forwarder:
        entered: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(entered,), name="netns-forwarder", daemon=True
        )
        self._thread.start()
        entered.result(timeout=30)
        return self

    def _run(self, entered: Future[None]) -> None:
        try:
            enter(self.ns)
        except BaseException as exc:
            entered.set_exception(exc)
            return
        entered.set_result(None)
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        self._loop.close()

    def forward(self, host: str, port: int) -> str:
        """`127.0.0.1:P` on the host, relaying to `host:port` inside the namespace (one listener
        per target, made on first use)."""
        with self._lock:
            if (host, port) not in self._targets:
                # made here, in the caller's (the host's) namespace, before the loop takes it
                listener = socket.create_server(("127.0.0.1", 0), backlog=64)
                listener.setblocking(False)
                asyncio.run_coroutine_threadsafe(self._serve(listener, host, port), self._loop).result(30)
                self._targets[host, port] = f"127.0.0.1:{listener.getsockname()[1]}"
            return self._targets[host, port]

    async def _serve(self, listener: socket.socket, host: str, port: int) -> None:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _relay(reader, writer, host, port)

        self._servers.append(await asyncio.start_server(accepted, sock=listener, limit=CHUNK))

    def stop(self) -> None:
        """Listeners closed, open relays ended, the thread gone."""
        if self._thread is None:
            return

        async def close() -> None:
            for server in self._servers:
                server.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None


async def _relay(
    client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int
) -> None:
    try:
        target_r, target_w = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=CHUNK), CONNECT_TIMEOUT
        )
    except (TimeoutError, OSError):
        _reset(client_w)
        return
    try:
        await asyncio.gather(_pipe(client_r, target_w), _pipe(target_r, client_w))
    finally:
        for writer in (client_w, target_w):
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction, until EOF (passed on as a half-close) or an error (both ends reset)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """The connection closed with a reset (SO_LINGER 0), as a refused or broken one looks."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


@contextlib.contextmanager
def forwarder(ns: Netns) -> Iterator[Forwarder]:
    """A running Forwarder into `ns`, stopped on exit."""
    running = Forwarder(ns.path).start()
    try:
        yield running
    finally:
        running.stop()


# ---------------------------------------------------------------- what a namespace holds


def _json(*args: str) -> list[dict[str, Any]]:
    return list(json.loads(_ip("-j", *args) or "[]"))


def routes(ns: Netns | None = None) -> list[dict[str, Any]]:
    """Every route of every table in `ns` (the host's namespace when None), as `ip -j` gives them."""
    prefix = ("-n", ns.name) if ns else ()
    return [
        *_json(*prefix, "route", "show", "table", "all"),
        *_json(*prefix, "-6", "route", "show", "table", "all"),
    ]


def links(ns: Netns | None = None) -> dict[str, str]:
    """Interface name -> its kind (`bridge`, `veth`..., "" for a device with none, as loopback or a
    NIC) in `ns`, or in the host's namespace when None."""
    prefix = ("-n", ns.name) if ns else ()
    return {
        link["ifname"]: link.get("linkinfo", {}).get("info_kind", "")
        for link in _json(*prefix, "-d", "link", "show")
    }


def kube_chains() -> set[str]:
    """The KUBE-* iptables chains of the caller's namespace, per family and table."""
    found = set()
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            rules = subprocess.run(
                [tool, "-t", table, "-S"], capture_output=True, text=True, check=False
            ).stdout
            for rule in rules.splitlines():
                words = rule.split()
                if words[:1] == ["-N"] and words[1].startswith("KUBE-"):
                    found.add(f"{tool} {table} {words[1]}")
    return found
