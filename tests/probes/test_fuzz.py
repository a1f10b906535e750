"""Fuzzing all 15 RPCs, health and reflection over a real port: no UNKNOWN or INTERNAL, no traceback
text in answers or logs, no state change, flat memory.

The suite sends over 100,000 requests in all: 4,500 cases per backend with the compiled front on and
again with it off (14 servers, about 59,600 requests), and 20,500 cases through a fronted and an
unfronted server side by side (41,000); benchmarks/robustness.py sends 100,000 per backend and mode. A leak
like grpcio's deserialization failure path (about 19 KB per malformed request) would add more than
50 MB here; the limit is 10 MB, measured on the floor of the RSS samples (big requests make the
allocator's peaks noisy, a leak raises the floor)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.support import fuzz
from tests.support.backends import BackendUnderTest
from tests.support.probes import start_server
from tests.support.servers import channel, sim_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: the server's RSS climbs to a plateau over the first 2,000 to 3,000 hostile requests (allocator
#: pools, grpcio's buffers) and stays there (benchmarks/robustness.py: flat over 100,000); growth is
#: measured after it, over a window a leak of even 7 KB per request would overflow
WARMUP, COUNT, SAMPLE_EVERY = 3_000, 1_500, 250
MAX_GROWTH = 10 * 1024 * 1024
#: Refresh is the one RPC that calls the cloud, under the client's rate limit (the cloud's published
#: budget: Cherry 4/s, Exoscale 10/s with 5 calls per Refresh), so each of its cases that parses costs
#: real time; the suite sends every 10th of them (30 in all, 100 s less on the slowest backends) and
#: benchmarks/robustness.py sends them all
REFRESH_EVERY = 10


@functools.cache
def _corpus() -> tuple[fuzz.Case, ...]:
    """The cases every backend and mode is sent, made once per test process: about a millisecond
    of CPU each to make, the same for every server (about 60 MB held)."""
    return tuple(fuzz.cases(seed=14, count=WARMUP + COUNT))


@pytest.mark.parametrize("front", ["on", "off"])
def test_fuzzing_every_rpc(
    backend: BackendUnderTest, front: str, compiled_front: Path | None, tmp_path: Path
) -> None:
    if front == "on" and compiled_front is None:
        pytest.skip("the compiled front is not built here (Go missing); CI always builds it")
    server = start_server(backend, tmp_path, extra=["--front", front])
    try:
        ch = server.channel()
        before = fuzz.state(ch)
        tally = fuzz.Tally()
        warm: list[int] = []
        later: list[int] = []
        front_warm: list[int] = []
        front_later: list[int] = []
        refreshes = 0
        for i, case in enumerate(_corpus()):
            if case.method == "Refresh":
                refreshes += 1
                if refreshes % REFRESH_EVERY:
                    continue
            fuzz.send(ch, case, tally)
            if i % SAMPLE_EVERY == 0:
                (warm if i < WARMUP else later).append(server.rss_bytes())
                (front_warm if i < WARMUP else front_later).append(server.front_rss_bytes())
        after = fuzz.state(ch)
        growth = min(later[-4:]) - min(warm[-3:])
        front_growth = min(front_later[-4:]) - min(front_warm[-3:])
        output = server.output()
    finally:
        server.close()
    assert tally.by_code.get("OK", 0) > 0 and tally.requests > 4_000  # the calls really went out
    assert tally.failures == 0 and not tally.bad, "\n".join(tally.bad)
    assert after == before, "fuzzing changed the state CA sees"
    assert growth < MAX_GROWTH, f"RSS grew by {growth / 1e6:.1f} MB over {COUNT} requests"
    assert front_growth < MAX_GROWTH, (
        f"the front's RSS grew by {front_growth / 1e6:.1f} MB over {COUNT} requests"
    )
    assert "Traceback" not in output
    assert '"level": "error"' not in output and '"level": "critical"' not in output
    # one warning a minute at most about malformed bodies, however many there were
    assert output.count("does not parse") <= 2


#: the corpus sent through both paths by the suite: the cases go round-robin over the 17 methods and 5
#: kinds, so each pair is sent 35 times; benchmarks/robustness.py --probe compare sends more
COMPARE_COUNT = 3_000


# 6,000 requests one after another: under a minute alone on two cores, a few beside the rest of the
# suite; the limit guards against a hang, not against a slow machine
@pytest.mark.timeout(900)
def test_every_fuzzed_request_gets_the_same_answer_with_and_without_the_front(
    compiled_front: Path | None,
) -> None:
    """The same hostile corpus against a server behind the compiled front and one without it: every
    request gets the same status code and message from both."""
    if compiled_front is None:
        pytest.skip("the compiled front is not built here (Go missing); CI always builds it")
    with sim_server(front="on") as fronted, sim_server(front="off") as alone:
        assert fronted.front is not None and alone.front is None
        through, direct = channel(fronted), channel(alone)
        tallies = fuzz.Tally(), fuzz.Tally()
        differences: list[str] = []
        for case in fuzz.cases(seed=22, count=COMPARE_COUNT):
            answers = [
                fuzz.send(ch, case, tally) for ch, tally in zip((through, direct), tallies, strict=True)
            ]
            if answers[0] != answers[1] and len(differences) < 20:
                differences.append(f"{case.method} ({case.kind}, {len(case.body)} bytes): {answers}")
    assert tallies[0].requests == tallies[1].requests == COMPARE_COUNT
    assert not differences, "\n".join(differences)
    assert tallies[0].failures == tallies[1].failures == 0, "\n".join(tallies[0].bad + tallies[1].bad)
