"""The shared emulator base over real HTTP: routing, auth hook, faults, rate limit, log, persistence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, HttpProblem, Request, Response

pytestmark = pytest.mark.integration


class Counter(EmulatorServer):
    """A toy cloud: POST /v1/counter adds one, GET reads it; token "good" only."""

    name = "counter"
    prefix = "/v1/"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.value = 0
        self.route("GET", "/v1/counter", lambda r: Response(200, {"value": self.value}))
        self.route("POST", "/v1/counter", self._add)
        self.route("GET", "/v1/items/{item_id}", lambda r: Response(200, {"id": r.params["item_id"]}))

    def _add(self, req: Request) -> Response:
        self.value += 1
        return Response(201, {"value": self.value})

    def authenticate(self, request: Request) -> str:
        if request.headers.get("Authorization") != "Bearer good":
            raise HttpProblem(401, "bad token")
        return "me"

    def snapshot(self) -> dict[str, Any]:
        return {"value": self.value}

    def restore(self, data: dict[str, Any]) -> None:
        self.value = data["value"]


H = {"Authorization": "Bearer good"}


def test_routing_auth_and_error_bodies() -> None:
    with Counter() as emu:
        base = emu.base_url
        assert requests.get(base + "items/42", headers=H).json() == {"id": "42"}
        r = requests.get(base + "counter")
        assert r.status_code == 401 and r.json() == {"code": 401, "message": "bad token"}
        assert r.headers["Content-Type"] == "application/json"
        assert requests.get(base + "nothing", headers=H).status_code == 404
        assert requests.delete(base + "counter", headers=H).status_code == 405
        assert [e.status for e in emu.request_log()] == [200, 401, 404, 405]


def test_fault_kinds_differ_in_whether_the_request_was_processed() -> None:
    with Counter() as emu:
        url = emu.base_url + "counter"
        emu.set_faults(FaultPlan(rate=1.0, kinds=("error",), error_statuses=(503,)))
        assert requests.post(url, headers=H).status_code == 503
        assert emu.value == 0
        emu.set_faults(FaultPlan(rate=1.0, kinds=("error_after",), error_statuses=(502,)))
        assert requests.post(url, headers=H).status_code == 502
        assert emu.value == 1
        emu.set_faults(FaultPlan(rate=1.0, kinds=("throttle",), retry_after="3"))
        r = requests.post(url, headers=H)
        assert r.status_code == 429 and r.headers["Retry-After"] == "3" and emu.value == 1
        emu.set_faults(FaultPlan(rate=1.0, kinds=("drop",)))
        with pytest.raises(requests.ConnectionError):
            requests.post(url, headers=H)
        assert emu.value == 2
        emu.set_faults(None)
        assert requests.get(url, headers=H).json() == {"value": 2}
        faults = [(e.fault, e.processed) for e in emu.request_log()]
        assert faults == [
            ("error", False),
            ("error_after", True),
            ("throttle", False),
            ("drop", True),
            (None, True),
        ]


def test_fault_plan_is_seeded_and_respects_rate_and_methods() -> None:
    a = FaultPlan(rate=0.3, seed=7)
    b = FaultPlan(rate=0.3, seed=7)
    draws_a = [a.choose("GET") for _ in range(200)]
    assert draws_a == [b.choose("GET") for _ in range(200)]
    hits = sum(1 for d in draws_a if d)
    assert 30 <= hits <= 90  # about 30% of 200
    only_post = FaultPlan(rate=1.0, methods=frozenset({"POST"}))
    assert only_post.choose("GET") is None and only_post.choose("POST") is not None
    with pytest.raises(ValueError):
        FaultPlan(rate=1.5)
    with pytest.raises(ValueError):
        FaultPlan(rate=0.1, kinds=("meteor",))


def test_rate_limit_answers_429_with_retry_after() -> None:
    with Counter(rate_limit_per_s=2) as emu:
        statuses = [requests.get(emu.base_url + "counter", headers=H) for _ in range(6)]
        codes = [r.status_code for r in statuses]
        assert codes[:2] == [200, 200]
        assert 429 in codes
        limited = next(r for r in statuses if r.status_code == 429)
        assert limited.headers["Retry-After"] == "1"
        assert limited.json()["code"] == 429


def test_state_persists_across_restarts(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with Counter(state_file=state) as emu:
        for _ in range(3):
            requests.post(emu.base_url + "counter", headers=H)
    assert json.loads(state.read_text()) == {"value": 3}
    with Counter(state_file=state) as emu:
        assert requests.get(emu.base_url + "counter", headers=H).json() == {"value": 3}


def test_injectable_clock_stamps_the_log() -> None:
    with Counter(clock=lambda: 1234.5) as emu:
        requests.get(emu.base_url + "counter", headers=H)
        assert emu.request_log()[0].time == 1234.5


def test_the_request_log_is_bounded_and_marks_stay_comparable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running emulator keeps only the newest requests; `log_mark()` still counts them all."""
    from cloudprovider_grpc.emulators import server

    monkeypatch.setattr(server, "REQUEST_LOG_SIZE", 5)
    with Counter() as emu:
        hdr = {"Authorization": "Bearer good"}
        for _ in range(8):
            requests.get(f"{emu.base_url}counter", headers=hdr, timeout=5)
        assert emu.log_mark() == 8 and len(emu.request_log()) == 5
        mark = emu.log_mark()
        requests.post(f"{emu.base_url}counter", headers=hdr, timeout=5)
        assert [e.method for e in emu.request_log(since=mark)] == ["POST"]
        emu.clear_log()
        assert emu.request_log() == [] and emu.log_mark() == 9


def test_keep_history_shortens_the_log_and_marks_stay_comparable() -> None:
    with Counter() as emu:
        for _ in range(6):
            requests.get(f"{emu.base_url}counter", headers=H, timeout=5)
        emu.keep_history(4)
        assert emu.log_mark() == 6 and len(emu.request_log()) == 4
        mark = emu.log_mark()
        for _ in range(3):
            requests.post(f"{emu.base_url}counter", headers=H, timeout=5)
        assert emu.log_mark() == 9 and [e.method for e in emu.request_log()] == ["GET"] + ["POST"] * 3
        assert [e.method for e in emu.request_log(since=mark)] == ["POST"] * 3


def test_an_emulator_started_for_emulate_keeps_a_short_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve --emulate`'s emulator serves the server's own client and nobody reads its history:
    it remembers EMBEDDED_EMULATOR_HISTORY requests, not REQUEST_LOG_SIZE."""
    from cloudprovider_grpc.providers import registry
    from cloudprovider_grpc.providers.options import ClientTuning

    monkeypatch.setattr(registry, "EMBEDDED_EMULATOR_HISTORY", 3)
    emu = Counter()
    urls: list[str | None] = []
    built = registry.assemble(
        registry.ProviderContext(emulate=True),
        lambda url: urls.append(url),  # type: ignore[func-returns-value,arg-type]
        start_emulator=emu.start,
        tuning=ClientTuning(catalog_ttl=60.0),
    )
    try:
        assert urls == [emu.base_url]
        for _ in range(5):
            requests.get(f"{emu.base_url}counter", headers=H, timeout=5)
        assert emu.log_mark() == 5 and len(emu.request_log()) == 3
    finally:
        assert built.on_stop is not None
        built.on_stop()


def _exchange(emu: Counter, raw: bytes) -> bytes:
    """Send raw bytes on one connection, read until the server closes it."""
    import socket

    host, port = emu.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(raw)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_chunked_request_body_is_read_whole_and_the_next_request_follows() -> None:
    """A body sent with chunked transfer coding (what HTTP clients do for streamed bodies) is the
    request's body; its bytes are never parsed as the next request on the connection."""
    with Counter() as emu:
        posted: list[bytes] = []

        def echo(req: Request) -> Response:
            posted.append(req.body)
            return Response(200, {"n": len(req.body)})

        emu.route("POST", "/v1/echo", echo)
        chunked = (
            b"POST /v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n"
            b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
            b'7;ext=1\r\n{"a": 1\r\n3\r\n, "\r\n7\r\nb": 22}\r\n0\r\n\r\n'
        )
        follow = (
            b"GET /v1/counter HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\nConnection: close\r\n\r\n"
        )
        answer = _exchange(emu, chunked + follow)
        assert posted == [b'{"a": 1, "b": 22}']
        assert answer.count(b"HTTP/1.1 200") == 2, answer
        assert [(e.method, e.path, e.status) for e in emu.request_log()] == [
            ("POST", "/v1/echo", 200),
            ("GET", "/v1/counter", 200),
        ]
        # framing that does not parse: 400, and the connection is closed rather than misread
        bad = _exchange(
            emu,
            b"POST /v1/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"zz\r\nGET / HTTP/1.1\r\n\r\n",
        )
        assert bad.startswith(b"HTTP/1.1 400") and bad.count(b"HTTP/1.1") == 1, bad
