"""The compiled front (cloudprovider_grpc/front) over real sockets: cached answers follow
every state change, a serial caller never reads older state than a previous call showed, malformed
bodies still reach Python, each call is counted once, shutdown and kill -9 behave, and the
`--front` modes select the path that serves.

The rest of the suite runs through the front as well whenever it is built (`--front auto`, the
default), which is the proof that behaviour is unchanged; tests/grpcapi/test_rpcs.py also runs with
`--front off`. Here a small provider of our own makes state changes on demand, including ones from
a background thread, so each way a change reaches the front is tested on its own."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cloudprovider_grpc.config.settings import Settings
from cloudprovider_grpc.core.errors import NotFound
from cloudprovider_grpc.front import binary
from cloudprovider_grpc.grpcapi import rawparse
from cloudprovider_grpc.grpcapi.handlers import VERSION_TRAILER
from cloudprovider_grpc.grpcapi.server import ServerHandle, start_server
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import CloudProvider, Instance, NodeGroup, NodeRef
from tests.support.front import children, gone, serve
from tests.support.ports import free_port
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration

TARGET = "NodeGroupTargetSize"


@pytest.fixture(autouse=True)
def _front_built(compiled_front: Path | None) -> None:
    if compiled_front is None:
        pytest.skip("the compiled front is not built here (Go missing); CI always builds it")


class Dial(CloudProvider):
    """One group whose size the test sets: by RPC, on Refresh (from `cloud_size`) or in the
    background (`set_size`, as a worker would). `versioned=False` is a backend that cannot tell its
    state version."""

    name = "dial"

    def __init__(self, versioned: bool = True) -> None:
        self._lock = threading.Lock()
        self.size = 1
        self.cloud_size = 1
        self.version = 1
        self.versioned = versioned
        self.watchers: list[Callable[[int], None]] = []
        self.group = NodeGroup("g", 0, 100)
        self.refresh_entered = threading.Event()
        self.refresh_release = threading.Event()
        self.refresh_release.set()
        self.change_while_reading = 0
        self.members: set[str] = set()  # providerIDs outside "dial://g/" that belong to the group
        self.refresh_drops_members = False

    def _change(self, size: int) -> None:
        with self._lock:
            self.size = size
            self.version += 1
            version = self.version
        for callback in self.watchers:
            callback(version)

    def set_size(self, size: int) -> None:
        self._change(size)

    def state_version(self) -> int | None:
        return self.version if self.versioned else None

    def watch_state(self, callback: Callable[[int], None]) -> None:
        if self.versioned:
            self.watchers.append(callback)

    def node_groups(self) -> list[NodeGroup]:
        return [self.group]

    def node_group_for_node(self, node: NodeRef) -> NodeGroup | None:
        if "pool" in node.labels:
            return self.group if node.labels["pool"] == "g" else None
        member = node.provider_id.startswith("dial://g/") or node.provider_id in self.members
        return self.group if member else None

    def adopt(self, provider_id: str) -> None:
        """The group takes in a machine (as a listing showing a new one would)."""
        self.members.add(provider_id)
        self._change(self.size)

    def refresh(self) -> None:
        self.refresh_entered.set()
        self.refresh_release.wait(30)
        if self.refresh_drops_members:
            self.members.clear()
        self._change(self.cloud_size)

    def target_size(self, group_id: str) -> int:
        if group_id != "g":
            raise NotFound(f"node group {group_id!r} not found")
        size = self.size
        if self.change_while_reading:  # another thread's change lands while this answer is computed
            self.change_while_reading -= 1
            self._change(size)
        return size

    def increase_size(self, group_id: str, delta: int) -> None:
        self._change(self.target_size(group_id) + delta)

    def decrease_target_size(self, group_id: str, delta: int) -> None:
        self._change(self.target_size(group_id) + delta)

    def delete_nodes(self, group_id: str, nodes: list[NodeRef]) -> None:
        self._change(self.target_size(group_id) - len(nodes))

    def nodes(self, group_id: str) -> list[Instance]:
        return []


@contextmanager
def dial_server(provider: Dial) -> Iterator[ServerHandle]:
    settings = Settings(address="127.0.0.1:0", metrics_address="127.0.0.1:0", front="on")
    handle = start_server(settings, provider=provider)
    try:
        assert handle.front is not None
        yield handle
    finally:
        handle.stop(grace=2)


def split_counts(handle: ServerHandle, method: str, code: str) -> tuple[int, int]:
    """(answered by the front, handled by Python) for one method and code, so far."""
    assert handle.front is not None
    front = sum(n for m, c, n, _, _ in handle.front.counters.read() if (m, c.name) == (method, code))
    tally = metrics.RPC.tally(method, getattr(grpc.StatusCode, code))
    return front, tally.count


def target(s, group: str = "g") -> int:
    return s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=group), timeout=5).targetSize


def wait_until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_cached_answers_follow_writes_refresh_and_background_changes() -> None:
    dial = Dial()
    with dial_server(dial) as handle, channel(handle) as ch:
        s = stub(ch)
        front0, python0 = split_counts(handle, TARGET, "OK")
        assert [target(s) for _ in range(5)] == [1] * 5
        front1, python1 = split_counts(handle, TARGET, "OK")
        assert (front1 - front0, python1 - python0) == (4, 1)  # one computed by Python, four from the cache

        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=2), timeout=5)
        assert target(s) == 3  # a write: the reply brought the new version, the cache was dropped
        s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id="g", delta=-1), timeout=5)
        assert target(s) == 2

        dial.cloud_size = 7
        s.Refresh(pb.RefreshRequest(), timeout=5)
        assert target(s) == 7  # Refresh: the same

        assert target(s) == 7  # cached again
        threading.Thread(target=dial.set_size, args=(4,)).start()  # a background change, no RPC
        wait_until("the pushed version to reach the front", lambda: target(s) == 4)

        # ForNode and GetOptions' answer without options are cached per request and follow too
        member = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="dial://g/1"))
        foreign = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="other://x"))
        for _ in range(3):
            assert s.NodeGroupForNode(member, timeout=5).nodeGroup.id == "g"
            assert s.NodeGroupForNode(foreign, timeout=5).nodeGroup.id == ""
        options = pb.NodeGroupAutoscalingOptionsRequest(id="g")
        for _ in range(3):
            assert not s.NodeGroupGetOptions(options, timeout=5).HasField("nodeGroupAutoscalingOptions")
        front_ok, _ = split_counts(handle, "NodeGroupForNode", "OK")
        front_options, _ = split_counts(handle, "NodeGroupGetOptions", "OK")
        assert (front_ok, front_options) == (4, 2)


def test_a_node_in_no_group_costs_what_a_member_costs_and_follows_state_changes() -> None:
    """CA asks NodeGroupForNode about a node in no group at four or more call sites per loop (its
    client caches no empty answer): the empty answer is cached exactly as a member's, and dropped by
    the same rule, any change of state (here the node joining the group in the background, then
    leaving it on Refresh)."""
    dial = Dial()
    with dial_server(dial) as handle, channel(handle) as ch:
        s = stub(ch)
        stray = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="static://n1", name="n1"))
        member = pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="dial://g/1", name="g-1"))

        def group_of(request: pb.NodeGroupForNodeRequest) -> str:
            return s.NodeGroupForNode(request, timeout=5).nodeGroup.id

        front0, python0 = split_counts(handle, "NodeGroupForNode", "OK")
        assert [group_of(stray) for _ in range(4)] == [""] * 4
        front1, python1 = split_counts(handle, "NodeGroupForNode", "OK")
        assert (front1 - front0, python1 - python0) == (3, 1)  # Python once, then the cache
        assert [group_of(member) for _ in range(4)] == ["g"] * 4
        front2, python2 = split_counts(handle, "NodeGroupForNode", "OK")
        assert (front2 - front1, python2 - python1) == (3, 1)  # the same cost as the empty answer

        threading.Thread(target=dial.adopt, args=("static://n1",)).start()
        wait_until("the node's new group to reach the front", lambda: group_of(stray) == "g")
        dial.refresh_drops_members = True
        s.Refresh(pb.RefreshRequest(), timeout=5)
        assert group_of(stray) == ""  # never the cached "g" of the state before Refresh
        front3, python3 = split_counts(handle, "NodeGroupForNode", "OK")
        assert [group_of(stray) for _ in range(3)] == [""] * 3
        front4, python4 = split_counts(handle, "NodeGroupForNode", "OK")
        assert (front4 - front3, python4 - python3) == (3, 0)  # cached again for the new state


def test_a_backend_without_a_state_version_is_never_answered_from_the_cache() -> None:
    dial = Dial(versioned=False)
    with dial_server(dial) as handle, channel(handle) as ch:
        s = stub(ch)
        front0, python0 = split_counts(handle, TARGET, "OK")
        assert [target(s) for _ in range(5)] == [1] * 5
        front1, python1 = split_counts(handle, TARGET, "OK")
        assert (front1 - front0, python1 - python0) == (0, 5)
        dial.set_size(9)  # nobody is told: only an uncached answer can show it
        assert target(s) == 9


def for_node_request(provider_id: str, labels: list[tuple[str, str]]) -> bytes:
    """A NodeGroupForNode request with the label entries in exactly this order, as Go's encoder
    writes map entries in random order (duplicates allowed: what a hostile client could send)."""
    node = pb.ExternalGrpcNode(providerID=provider_id).SerializeToString()
    for key, value in labels:
        node += pb.ExternalGrpcNode(labels={key: value}).SerializeToString()
    return b"\x0a" + _varint(len(node)) + node  # field 1 (node), length-delimited


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def test_map_entries_in_any_order_share_one_cached_answer() -> None:
    with dial_server(Dial()) as handle, channel(handle) as ch:
        raw = ch.unary_unary(f"/{SERVICE_NAME}/NodeGroupForNode")
        labels = [("pool", "g"), ("zone", "z1"), ("arch", "amd64")]
        front0, python0 = split_counts(handle, "NodeGroupForNode", "OK")
        for order in (labels, labels[::-1], labels[1:] + labels[:1], labels):
            answer = pb.NodeGroupForNodeResponse.FromString(raw(for_node_request("x://1", order), timeout=5))
            assert answer.nodeGroup.id == "g"
        front1, python1 = split_counts(handle, "NodeGroupForNode", "OK")
        assert (front1 - front0, python1 - python0) == (3, 1)

        # a repeated key: the last value wins, so order matters and such requests are never shared
        for order, expected in (
            ([("pool", "x"), ("pool", "g")], "g"),
            ([("pool", "g"), ("pool", "x")], ""),
            ([("pool", "x"), ("pool", "g")], "g"),
            ([("pool", "g"), ("pool", "x")], ""),
        ):
            answer = pb.NodeGroupForNodeResponse.FromString(raw(for_node_request("x://2", order), timeout=5))
            assert answer.nodeGroup.id == expected


def test_an_answer_computed_while_the_state_changed_is_not_stored() -> None:
    dial = Dial()
    with dial_server(dial) as handle, channel(handle) as ch:
        s = stub(ch)
        dial.change_while_reading = 1
        front0, python0 = split_counts(handle, TARGET, "OK")
        assert [target(s) for _ in range(3)] == [1] * 3
        front1, python1 = split_counts(handle, TARGET, "OK")
        # the first answer straddled a change: not stored; the second was, and served the third
        assert (front1 - front0, python1 - python0) == (1, 2)


def test_a_serial_caller_never_reads_older_state_than_a_previous_call_showed() -> None:
    dial = Dial()
    stop = threading.Event()

    def noise() -> None:  # background version changes racing the calls (the size stays)
        while not stop.is_set():
            dial.set_size(dial.size)
            time.sleep(0.001)

    with dial_server(dial) as handle, channel(handle) as ch:
        s = stub(ch)
        churn = threading.Thread(target=noise)
        churn.start()
        try:
            expected = 1
            for i in range(150):
                if i % 3 == 2:
                    s.NodeGroupDecreaseTargetSize(
                        pb.NodeGroupDecreaseTargetSizeRequest(id="g", delta=-1), timeout=5
                    )
                    expected -= 1
                else:
                    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1), timeout=5)
                    expected += 1
                assert target(s) == expected
                assert target(s) == expected
        finally:
            stop.set()
            churn.join()


def scrape(handle: ServerHandle) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{handle.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("cloudprovider_grpc_rpc_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_metrics_count_each_call_once_whoever_answers_it() -> None:
    with dial_server(Dial()) as handle, channel(handle) as ch:
        s = stub(ch)
        ok = f'{{code="OK",method="{TARGET}"}}'
        missing = f'{{code="NOT_FOUND",method="{TARGET}"}}'
        before = scrape(handle)
        for _ in range(20):
            target(s)
        for _ in range(5):
            with pytest.raises(grpc.RpcError):
                target(s, "nope")
        after = scrape(handle)

        def grew(name: str) -> float:
            return after.get(name, 0.0) - before.get(name, 0.0)

        assert grew("cloudprovider_grpc_rpc_requests_total" + ok) == 20
        assert grew("cloudprovider_grpc_rpc_requests_total" + missing) == 5
        assert grew("cloudprovider_grpc_rpc_duration_seconds_count" + ok) == 20
        inf = f'cloudprovider_grpc_rpc_duration_seconds_bucket{{code="OK",le="+Inf",method="{TARGET}"}}'
        assert grew(inf) == 20
        # the front's counts survive its stop: folded into the totals
    final = metrics.RPC.tally(TARGET, grpc.StatusCode.OK).count
    assert final >= after["cloudprovider_grpc_rpc_requests_total" + ok]


def test_malformed_bodies_reach_python_every_time(monkeypatch, caplog) -> None:
    monkeypatch.setattr(rawparse, "MALFORMED", rawparse.MalformedLog())
    with dial_server(Dial()) as handle, channel(handle) as ch:
        raw = ch.unary_unary(f"/{SERVICE_NAME}/{TARGET}")
        _, python0 = split_counts(handle, TARGET, "INVALID_ARGUMENT")
        with caplog.at_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi.servicer"):
            for _ in range(3):
                with pytest.raises(grpc.RpcError) as info:
                    raw(b"\xff\xff\xff", timeout=5)
                assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        front, python = split_counts(handle, TARGET, "INVALID_ARGUMENT")
        assert (front, python - python0) == (0, 3)
        warnings = [r for r in caplog.records if "does not parse" in r.getMessage()]
        assert len(warnings) == 1


def test_the_version_trailer_never_reaches_the_caller() -> None:
    with dial_server(Dial()) as handle, channel(handle) as ch:
        s = stub(ch)
        for call, request in (
            (s.NodeGroupTargetSize, pb.NodeGroupTargetSizeRequest(id="g")),
            (s.Refresh, pb.RefreshRequest()),
        ):
            for _ in range(2):
                _, info = call.with_call(request, timeout=5)
                assert VERSION_TRAILER not in dict(info.trailing_metadata() or ())


def test_gzip_compressed_calls_are_accepted_as_by_grpcio() -> None:
    with dial_server(Dial()) as handle, channel(handle) as ch:
        s = stub(ch)
        for _ in range(2):  # computed by Python, then from the cache
            resp = s.NodeGroupTargetSize(
                pb.NodeGroupTargetSizeRequest(id="g"), timeout=5, compression=grpc.Compression.Gzip
            )
            assert resp.targetSize == 1
        groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5, compression=grpc.Compression.Gzip)
        assert [g.id for g in groups.nodeGroups] == ["g"]


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
