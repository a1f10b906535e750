"""The shared HTTP layer against a real HTTP server on loopback.

A scripted server (the shared emulator base with one route answering from a queue) makes each
retry case exact: we count what reached the server and what the client slept, never wall time.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from prometheus_client import REGISTRY, generate_latest

from cloudprovider_grpc.core.ratelimit import TokenBucket
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan, Request, Response
from cloudprovider_grpc.http import (
    BearerAuth,
    HttpClient,
    RetryPolicy,
    error_message_from_body,
    parse_retry_after,
)
from cloudprovider_grpc.http.fence import FencedOff, fenced
from cloudprovider_grpc.providers.driver import CloudError
from tests.support.waits import poll

pytestmark = pytest.mark.integration

TOKEN = "tok-9f8e7d6c5b4a-SECRET"


class Scripted(EmulatorServer):
    """Answers /api/thing (any method) from a queue of Responses; the default is 200 {"ok": true}.
    A Response with status 0 means "sleep `body` seconds, then answer 200"."""

    name = "scripted"
    prefix = "/api/"

    def __init__(self) -> None:
        super().__init__()
        self.script: deque[Response] = deque()
        self.auth_headers: list[str] = []
        for m in ("GET", "POST", "PUT", "DELETE"):
            self.route(m, "/api/thing", self._thing)

    def _thing(self, req: Request) -> Response:
        self.auth_headers.append(req.headers.get("Authorization", ""))
        if not self.script:
            return Response(200, {"ok": True})
        return self.script.popleft()

    def hits(self) -> int:
        return sum(1 for e in self.request_log() if e.path == "/api/thing")


@pytest.fixture
def server():
    with Scripted() as s:
        yield s


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def client(server: Scripted, sleeps: Sleeps, **kw) -> HttpClient:
    kw.setdefault("retry", RetryPolicy(retries=3, base_backoff=0.1, max_backoff=1.0, max_retry_after=30))
    kw.setdefault("timeout", (1.0, 2.0))
    return HttpClient("testcloud", server.base_url, auth=BearerAuth(TOKEN), sleep=sleeps, **kw)


def test_get_retries_5xx_then_succeeds_and_sends_bearer_token(server: Scripted) -> None:
    sleeps = Sleeps()
    server.script.extend([Response(503, {"message": "busy"}), Response(502, {"message": "gateway"})])
    reply = client(server, sleeps).request("GET", "thing", operation="get_thing")
    assert reply.json() == {"ok": True}
    assert server.hits() == 3
    assert len(sleeps) == 2 and all(0 <= s <= 1.0 for s in sleeps)
    assert server.auth_headers == [f"Bearer {TOKEN}"] * 3


def test_retry_after_seconds_and_http_date_are_honoured_and_capped(server: Scripted) -> None:
    sleeps = Sleeps()
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    server.script.extend(
        [
            Response(429, {"message": "slow down"}, {"Retry-After": "7"}),
            Response(429, {"message": "slow down"}, {"Retry-After": when}),
            Response(503, {"message": "later"}, {"Retry-After": "3600"}),
        ]
    )
    client(server, sleeps).request("GET", "thing", operation="get_thing")
    assert sleeps[0] == 7
    assert 15 < sleeps[1] <= 20
    assert sleeps[2] == 30  # capped by max_retry_after


def test_post_is_retried_on_429_but_not_on_5xx(server: Scripted) -> None:
    sleeps = Sleeps()
    server.script.extend(
        [Response(429, {"message": "throttled"}, {"Retry-After": "1"}), Response(201, {"id": 1})]
    )
    assert client(server, sleeps).request("POST", "thing", operation="create", json_body={}).json() == {
        "id": 1
    }
    assert server.hits() == 2 and sleeps == [1]

    server.clear_log()
    server.script.extend([Response(500, {"code": 500, "message": "internal failure"})])
    with pytest.raises(CloudError) as err:
        client(server, Sleeps()).request("POST", "thing", operation="create", json_body={})
    assert server.hits() == 1
    assert err.value.transient and err.value.status == 500
    assert "internal failure" in err.value.message and "create" in err.value.message


def test_a_term_that_ends_during_a_retry_sleep_sends_nothing_more(server: Scripted) -> None:
    """The fence is asked right before each attempt leaves: a 429 is answered, the term ends while
    the client sleeps out Retry-After, and the retry is never sent (nothing ambiguous: not sent)."""
    term = {"valid": True}

    def sleep_past_the_term(seconds: float) -> None:
        term["valid"] = False

    server.script.extend([Response(429, {"message": "throttled"}, {"Retry-After": "1"})])
    http = HttpClient("testcloud", server.base_url, sleep=sleep_past_the_term, retry=RetryPolicy(retries=3))
    with fenced(lambda: term["valid"]), pytest.raises(FencedOff) as err:
        http.request("POST", "thing", operation="create", json_body={})
    assert server.hits() == 1
    assert not err.value.transient and "not sent: the leadership term is over" in err.value.message
    http.request("POST", "thing", operation="create", json_body={})  # outside a job: no fence
    assert server.hits() == 2


def test_post_is_not_retried_after_a_read_timeout_but_get_is(server: Scripted) -> None:
    server.set_faults(FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=0.6))
    with pytest.raises(CloudError) as err:
        client(server, Sleeps(), timeout=(1.0, 0.2)).request(
            "POST", "thing", operation="create", json_body={}
        )
    assert err.value.transient and err.value.status is None
    assert "no response within 0.2s" in err.value.message
    # the slow answer is still processed after the client gave up: exactly one create reached the cloud
    poll(lambda: server.hits() >= 1, 5, "the first request to reach the server")
    assert server.hits() == 1

    server.clear_log()
    sleeps = Sleeps()
    with pytest.raises(CloudError):
        client(server, sleeps, timeout=(1.0, 0.2), retry=RetryPolicy(retries=1)).request(
            "GET", "thing", operation="get"
        )
    assert len(sleeps) == 1  # GET: one retry


def test_connection_refused_is_retried_even_for_post() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    http = HttpClient(
        "testcloud",
        f"http://127.0.0.1:{port}/",
        auth=BearerAuth(TOKEN),
        sleep=sleeps,
        retry=RetryPolicy(retries=2),
    )
    with pytest.raises(CloudError) as err:
        http.request("POST", "thing", operation="create", json_body={})
    assert len(sleeps) == 2  # never sent, so safe to try again
    assert err.value.transient and "connection refused" in err.value.message


def test_non_retryable_error_carries_the_cloud_message(server: Scripted) -> None:
    sleeps = Sleeps()
    server.script.append(Response(400, {"code": 400, "message": "Given server plan was not found."}))
    with pytest.raises(CloudError) as err:
        client(server, sleeps).request("GET", "thing", operation="get_thing")
    assert sleeps == [] and server.hits() == 1
    assert not err.value.transient and err.value.status == 400
    assert err.value.message == "testcloud get_thing (GET /thing): HTTP 400: Given server plan was not found."


def test_rate_limit_spaces_requests() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    bucket = TokenBucket(4.0, 1.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        bucket.acquire()
    # the first is free, then one every 1/4 s
    assert sum(sleeps) == pytest.approx(1.0)
    assert not bucket.try_acquire()
    now[0] += 0.25
    assert bucket.try_acquire()


def test_http_client_applies_its_rate_limit(server: Scripted) -> None:
    sleeps = Sleeps()  # records waits instead of sleeping: the bucket then keeps refusing, so waits add up
    http = client(server, sleeps, rate_limit_per_s=2.0)
    for _ in range(3):
        http.request("GET", "thing", operation="get")
    assert len(sleeps) >= 2 and all(0 < s <= 0.5 for s in sleeps)


def test_secrets_never_appear_in_logs_errors_reprs_or_metrics(server: Scripted, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    # a hostile/buggy server echoing the token in its error body
    server.script.extend(
        [
            Response(503, {"message": f"bad token {TOKEN}"}),
            Response(401, {"message": f"token {TOKEN} is invalid"}),
        ]
    )
    http = client(server, Sleeps())
    with pytest.raises(CloudError) as err:
        http.request("GET", "thing", operation="get_thing")
    texts = [
        err.value.message,
        str(err.value),
        repr(err.value),
        repr(http),
        str(http),
        repr(BearerAuth(TOKEN)),
        caplog.text,
        generate_latest(REGISTRY).decode(),
    ]
    for text in texts:
        assert TOKEN not in text
    assert "token *** is invalid" in err.value.message


def test_metrics_count_requests_by_backend_operation_status(server: Scripted) -> None:
    def count(status: str) -> float:
        return (
            REGISTRY.get_sample_value(
                "cloudprovider_grpc_cloud_api_requests_total",
                {"backend": "testcloud", "operation": "metered", "status": status},
            )
            or 0.0
        )

    before_ok, before_503 = count("200"), count("503")
    server.script.append(Response(503, {"message": "busy"}))
    client(server, Sleeps()).request("GET", "thing", operation="metered")
    assert count("200") - before_ok == 1
    assert count("503") - before_503 == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"code": 400, "message": "Plan x is out of stock"}', "Plan x is out of stock"),
        (b'{"error": "single", "errors": ["a", "b"]}', "single; a; b"),
        (
            b'{"detail": "Authentication credentials were not provided."}',
            "Authentication credentials were not provided.",
        ),
        (b"<html>  Bad\n Gateway </html>", "<html> Bad Gateway </html>"),
        (b"", "(empty body)"),
    ],
)
def test_error_message_from_body(body: bytes, expected: str) -> None:
    assert error_message_from_body(body) == expected


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("12") == 12
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now) == 30
    assert parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now) == 0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_urgent_callers_go_before_queued_background_callers() -> None:
    import threading

    bucket = TokenBucket(20.0, 1.0)
    order: list[str] = []
    lock = threading.Lock()

    def background(i: int) -> None:
        bucket.acquire()
        with lock:
            order.append(f"bg{i}")

    threads = [threading.Thread(target=background, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    poll(lambda: len(order) >= 1, 5, "the first caller to take a token")
    with lock:
        before = len(order)
    bucket.acquire(urgent=True)
    with lock:
        order.append("urgent")
    for t in threads:
        t.join(timeout=5)
    assert len(order) == 7
    # the urgent caller took the next token (or the one after, if a background caller was mid-take)
    assert order.index("urgent") <= before + 1, order


def test_background_callers_are_not_starved_by_urgent_demand_at_the_full_rate() -> None:
    """Urgent callers that keep the bucket saturated still leave a background caller that has waited
    `starve_after` one token per interval (without it, the background caller would wait forever)."""
    import threading

    bucket = TokenBucket(50.0, 1.0, starve_after=0.2)
    stop = threading.Event()
    urgent_taken = [0]

    def hog() -> None:
        while not stop.is_set():
            bucket.acquire(urgent=True)
            urgent_taken[0] += 1

    hogs = [threading.Thread(target=hog, daemon=True) for _ in range(3)]
    for t in hogs:
        t.start()
    poll(
        lambda: urgent_taken[0] >= 5, 5, "urgent callers to saturate the bucket"
    )  # the bucket is saturated by urgent callers
    done = threading.Event()
    threading.Thread(target=lambda: (bucket.acquire(), done.set()), daemon=True).start()
    try:
        assert done.wait(10), "a background caller was starved by urgent callers"
    finally:
        stop.set()
        for t in hogs:
            t.join(timeout=5)
    assert urgent_taken[0] > 5  # urgent callers kept being served meanwhile
