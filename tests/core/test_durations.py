"""One Go-duration reader for every setting: the spellings Go's `time.ParseDuration` takes are read
to the same seconds, the ones it refuses are refused, and each caller's range rule stays its own."""

from __future__ import annotations

import math

import pytest

from cloudprovider_grpc.core.durations import parse_duration, parse_go_duration
from cloudprovider_grpc.ha.settings import LeaderElection
from cloudprovider_grpc.simulator.scenario import parse_duration as scenario_duration

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("-0", 0.0),
        ("15s", 15.0),
        ("1m30s", 90.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("+2s", 2.0),
        ("-1m", -60.0),
        ("1h2m3s4ms5us6ns", 3723.004005006),
        ("3µs", 3e-6),
        ("3μs", 3e-6),
        (" 10s ", 10.0),
    ],
)
def test_go_spellings_read_as_go_reads_them(text: str, seconds: float) -> None:
    assert math.isclose(parse_go_duration(text), seconds, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize("text", ["", "-", "10", "1.5", "10x", "m", ".s", "1h5", "1 h", "1d", "s10"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_go_duration(text)


def test_numbers_are_seconds_and_bools_are_not_durations() -> None:
    assert parse_duration(90) == 90.0 and parse_duration(1.5) == 1.5 and parse_duration(-1) == -1.0
    assert parse_duration("90") == 90.0 and parse_duration(" 0.2 ") == 0.2 and parse_duration(".5") == 0.5
    for bad in ("1.5.2", "1e3", "nan", "inf", ""):
        with pytest.raises(ValueError, match="is not a duration"):
            parse_duration(bad)
    for bad in (True, None, math.nan, [1]):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_the_settings_and_the_scenarios_share_the_reader_and_keep_their_own_ranges() -> None:
    assert LeaderElection(lease_duration="1m", renew_deadline="45s", retry_period=".5s").lease_duration == 60
    # a number written as text (an environment variable) means seconds, as the same number in YAML
    assert LeaderElection(lease_duration="15").lease_duration == 15.0
    with pytest.raises(ValueError, match="is not a duration"):
        LeaderElection(lease_duration="15x")
    with pytest.raises(ValueError, match="must be positive"):
        LeaderElection(retry_period="-1s")
    assert scenario_duration("1h30m") == 5400.0
    with pytest.raises(ValueError, match="cannot be negative"):
        scenario_duration("-5s")
