"""The compiled front (cloudprovider_grpc/front) over real sockets, while it serves: cached answers
follow every state change, a serial caller never reads older state than a previous call showed,
malformed bodies still reach Python and each call is counted once.

The rest of the suite runs through the front as well whenever it is built (`--front auto`, the
default), which is the proof that behaviour is unchanged; tests/grpcapi/test_rpcs.py also runs with
`--front off`. Here a small provider of our own (tests/support/dial.py) makes state changes on
demand, including ones from a background thread, so each way a change reaches the front is tested
on its own. How the front starts and stops is in test_front_lifecycle.py."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request

import grpc
import pytest

from cloudprovider_grpc.grpcapi import rawparse
from cloudprovider_grpc.grpcapi.handlers import VERSION_TRAILER
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.observability import metrics
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.server.assembly import ServerHandle
from tests.support.dial import Dial, dial_server, target, wait_until
from tests.support.servers import channel, stub

pytestmark = pytest.mark.integration

TARGET = "NodeGroupTargetSize"


def split_counts(handle: ServerHandle, method: str, code: str) -> tuple[int, int]:
    """(answered by the front, handled by Python) for one method and code, so far."""
    assert handle.front is not None
    front = sum(n for m, c, n, _, _ in handle.front.counters.read() if (m, c.name) == (method, code))
    tally = metrics.RPC.tally(method, getattr(grpc.StatusCode, code))
    return front, tally.count


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
        with caplog.at_level(logging.WARNING, logger="cloudprovider_grpc.grpcapi"):
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
