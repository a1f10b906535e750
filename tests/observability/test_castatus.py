"""The status ConfigMap's document in cluster-autoscaler's shape: Go's time layout to the
nanosecond, CA's names and paths for the concepts CA has, ours beside them."""

from __future__ import annotations

import pytest
import yaml

from cloudprovider_grpc.observability.castatus import ca_shaped, go_time, to_yaml

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("wall", "text"),
    [
        (1_796_000_000.0, "2026-11-30 00:53:20 +0000 UTC"),  # no fraction: no dot, as Go prints it
        (1_796_000_000.5, "2026-11-30 00:53:20.5 +0000 UTC"),  # trailing zeros dropped
        (1_796_000_000.125, "2026-11-30 00:53:20.125 +0000 UTC"),
    ],
)
def test_go_time_is_gos_default_layout(wall: float, text: str) -> None:
    assert go_time(wall) == text


def test_a_group_in_backoff_reads_as_cas_does() -> None:
    doc = {
        "provider": "vultr",
        "groups": [
            {
                "id": "e3e70682",
                "name": "general",
                "min": 1,
                "max": 10,
                "target": 3,
                "instances": {"running": 1, "creating": 0, "failed": 2},
                "operations": [],
                "backoff": {"reason": "StockOut", "message": "out of stock", "until": "2026-12-01T20:00:00Z"},
            },
            {"id": "f7c1", "name": "highmem", "min": 0, "max": 5, "target": 1, "instances": {"creating": 1}},
        ],
    }
    status = yaml.safe_load(to_yaml(doc, 1_796_000_000.0))
    assert status == ca_shaped(doc, 1_796_000_000.0)
    general, highmem = status["nodeGroups"]
    assert (general["name"], general["displayName"]) == ("e3e70682", "general")
    assert general["cloudProviderTarget"] == general["health"]["cloudProviderTarget"] == 3
    assert (general["health"]["minSize"], general["health"]["maxSize"]) == (1, 10)
    assert general["health"]["status"] == "Unhealthy"
    assert general["scaleUp"]["status"] == "Backoff"
    assert general["scaleUp"]["backoffInfo"] == {"errorCode": "StockOut", "errorMessage": "out of stock"}
    assert highmem["scaleUp"] == {"status": "InProgress"} and highmem["health"]["status"] == "Healthy"
