"""The providers' activity record (providers/machinery/activity.py) and the status document's rules
(server/status.py): which occurrences a failure makes, which back-off it holds, what counts
as a change."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.clouderrors import ErrorClass
from cloudprovider_grpc.providers.machinery.activity import Activity, Occurrence
from cloudprovider_grpc.server import status
from tests.support.servers import ManualClock

pytestmark = pytest.mark.unit


def recorded() -> tuple[Activity, list[Occurrence], ManualClock]:
    wall = ManualClock(1_800_000_000.0)
    activity = Activity(wall)
    seen: list[Occurrence] = []
    activity.listen(seen.append)
    return activity, seen, wall


def test_a_stock_out_is_a_failed_creation_and_a_backoff_for_as_long_as_it_is_shown() -> None:
    activity, seen, wall = recorded()
    activity.create_failed(
        "pool1", "OUT_OF_STOCK", "plan x is out of stock", ErrorClass.OUT_OF_RESOURCES, 600
    )
    assert [(o.reason, o.warning, o.node) for o in seen] == [
        ("MachineCreateFailed", True, ""),
        ("StockOut", True, ""),
    ]
    assert activity.current_backoffs()["pool1"].reason == "StockOut"
    assert activity.last_errors()["pool1"].code == "OUT_OF_STOCK"
    activity.succeeded("pool1")  # a later write going through does not end CA's back-off
    assert "pool1" in activity.current_backoffs()
    wall.advance(601)
    assert activity.current_backoffs() == {}


def test_another_refusal_is_a_failed_creation_without_a_backoff() -> None:
    activity, seen, _ = recorded()
    activity.create_failed("pool1", "HTTP_400", "bad image", ErrorClass.OTHER, 600)
    assert [o.reason for o in seen] == ["MachineCreateFailed"]
    assert activity.current_backoffs() == {}


def test_a_retried_failure_backs_off_until_a_write_goes_through() -> None:
    activity, seen, _ = recorded()
    activity.backing_off("pool1", "creating a machine", "HTTP 503", 4.0)
    assert [o.reason for o in seen] == ["BackingOff"] and "retrying in 4.0s" in seen[0].message
    assert activity.current_backoffs()["pool1"].reason == "BackingOff"
    activity.succeeded("pool1")
    assert activity.current_backoffs() == {}
    assert activity.last_errors()["pool1"].message == "HTTP 503"  # the last error stays shown


def test_a_listener_that_fails_does_not_fail_the_operation() -> None:
    activity, seen, _ = recorded()

    def broken(_: Occurrence) -> None:
        raise RuntimeError("listener bug")

    activity.listen(broken)
    activity.backing_off("pool1", "deleting m1", "timeout", 1.0)
    assert len(seen) == 1


def test_only_clock_readings_do_not_count_as_a_change() -> None:
    doc = {"time": "a", "groups": [{"id": "g", "operations": [{"kind": "create", "age_seconds": 1.0}]}]}
    later = {"time": "b", "groups": [{"id": "g", "operations": [{"kind": "create", "age_seconds": 9.5}]}]}
    assert status.stable(doc) == status.stable(later)
    later["groups"][0]["operations"].append({"kind": "delete", "age_seconds": 0.0})
    assert status.stable(doc) != status.stable(later)


def test_the_page_escapes_what_it_shows() -> None:
    doc = {
        "groups": [
            {
                "id": "g<script>",
                "min": 0,
                "max": 1,
                "target": 0,
                "instances": {},
                "operations": [],
                "last_error": {"at": "t", "code": "X", "message": "<b>boom</b>"},
            }
        ],
        "leader": {"enabled": False},
    }
    page = status.to_html(doc)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;boom" in page
