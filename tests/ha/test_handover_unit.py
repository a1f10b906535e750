"""The hand-over relay's phases (cloudprovider_grpc/ha/handover.py) one at a time, with threads standing
in for concurrent RPCs. The forwarding itself, over real sockets between real replicas (plaintext
and mutual TLS): tests/ha/test_election.py and benchmarks/failover.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cloudprovider_grpc.core.errors import Unavailable
from cloudprovider_grpc.ha.handover import HandOverRelay, Phase, advertised_address, certificate_name
from tests.support.certs import make_ca, pem, write_pki

pytestmark = pytest.mark.unit


class Context:
    """What the relay reads of a gRPC call's context: the time left before its deadline."""

    def __init__(self, remaining: float | None) -> None:
        self._until = None if remaining is None else time.monotonic() + remaining

    def time_remaining(self) -> float | None:
        return None if self._until is None else max(0.0, self._until - time.monotonic())


def _relay() -> HandOverRelay:
    return HandOverRelay("svc", "replica-a")


def test_before_a_hand_over_everything_runs_here() -> None:
    relay = _relay()
    assert not relay.engaged
    assert relay.call("NodeGroupTargetSize", b"", Context(5), lambda: "read") == "read"
    assert relay.call("NodeGroupIncreaseSize", b"", Context(5), lambda: "write") == "write"


def test_the_hand_over_waits_for_the_writes_running_here() -> None:
    relay = _relay()
    inside, release = threading.Event(), threading.Event()

    def slow_write() -> str:
        inside.set()
        release.wait(5)
        return "done"

    results: list[object] = []
    writer = threading.Thread(
        target=lambda: results.append(relay.call("NodeGroupIncreaseSize", b"", Context(5), slow_write))
    )
    writer.start()
    assert inside.wait(5)
    held = threading.Thread(target=relay.hold, args=(time.monotonic() + 10,))
    held.start()
    held.join(0.2)
    assert held.is_alive()  # still waiting for the write that runs here
    assert relay.phase is Phase.HOLDING
    release.set()
    held.join(5)
    writer.join(5)
    assert not held.is_alive() and results == ["done"]


def test_while_holding_reads_are_answered_here_and_writes_wait() -> None:
    relay = _relay()
    relay.hold(time.monotonic() + 10)
    assert relay.engaged
    assert relay.call("NodeGroups", b"", Context(5), lambda: "memory") == "memory"
    errors: list[Exception] = []

    def write() -> None:
        try:
            relay.call("NodeGroupDeleteNodes", b"", Context(5), lambda: pytest.fail("a held write ran here"))
        except Unavailable as exc:
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(0.2)
    assert writer.is_alive()  # held
    relay.refuse("no successor answered within the grace period")
    writer.join(5)
    (error,) = errors
    assert "nothing was recorded" in error.message and "no successor answered" in error.message


def test_a_held_write_is_answered_before_its_callers_deadline() -> None:
    relay = _relay()
    relay.hold(time.monotonic() + 10)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="did not answer within the call's deadline; nothing was recorded"):
        relay.call("NodeGroupIncreaseSize", b"", Context(0.5), lambda: pytest.fail("ran here"))
    assert time.monotonic() - started < 0.5  # UNAVAILABLE, not DEADLINE_EXCEEDED


def test_refusing_answers_reads_here_and_refuses_writes_at_once() -> None:
    relay = _relay()
    relay.hold(time.monotonic() + 10)
    relay.refuse("the next leader published no address")
    assert relay.call("NodeGroupNodes", b"", Context(5), lambda: "memory") == "memory"
    with pytest.raises(Unavailable, match="published no address"):
        relay.call("NodeGroupDecreaseTargetSize", b"", Context(None), lambda: pytest.fail("ran here"))


def test_the_certificate_name_is_its_first_dns_name_else_its_common_name(tmp_path: Path) -> None:
    pki = write_pki(tmp_path)
    assert certificate_name(pki.server_cert.read_bytes()) == "localhost"
    _, ca = make_ca("no alternative names")
    assert certificate_name(pem(ca)) == "no alternative names"


def test_the_advertised_address_names_the_listening_host_else_the_pod_ip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_IP", raising=False)
    assert advertised_address("127.0.0.1", 8086) == "127.0.0.1:8086"
    assert advertised_address("[::]", 8086) == ""  # every interface, no pod IP: nothing to publish
    monkeypatch.setenv("POD_IP", "10.244.1.17")
    assert advertised_address("[::]", 8086) == "10.244.1.17:8086"
    monkeypatch.setenv("POD_IP", "fd00::17")
    assert advertised_address("0.0.0.0", 8086) == "[fd00::17]:8086"
