"""/status (JSON) and /status.html on the metrics port: the server's view of every group, the
operations in flight with their age, the back-off and the last cloud error, for both shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.servers import ManualClock, channel, sim_server, stub

pytestmark = pytest.mark.integration


def _options(shape: str) -> dict[str, Any]:
    return {
        "shape": shape,
        "provisioning_delay": 30,
        "groups": [
            {"id": "ok", "min_size": 0, "max_size": 5},
            {"id": "sold-out", "min_size": 0, "max_size": 5, "fail": {"stockout_after": 0}},
        ],
    }


def _status(port: int, accept: str = "application/json") -> requests.Response:
    return requests.get(f"http://127.0.0.1:{port}/status", headers={"Accept": accept}, timeout=5)


@pytest.mark.parametrize("shape", ["machines", "pools"])
def test_status_shows_targets_operations_backoff_and_the_last_cloud_error(shape: str) -> None:
    clock = ManualClock()
    with sim_server(_options(shape), clock=clock, front="off") as handle:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="ok", delta=2))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="sold-out", delta=1))
        clock.advance(5)
        s.Refresh(pb.RefreshRequest())  # inline workers: the creations run here
        answer = _status(handle.metrics_port)
        assert answer.status_code == 200 and answer.headers["Content-Type"] == "application/json"
        doc = answer.json()
        groups = {g["id"]: g for g in doc["groups"]}
        assert doc["provider"] == "sim" and doc["leader"] == {"enabled": False}
        ok, sold_out = groups["ok"], groups["sold-out"]
        assert (ok["min"], ok["max"], ok["target"]) == (0, 5, 2)
        assert ok["instances"]["creating"] == 2 and "backoff" not in ok
        assert (sold_out["target"], sold_out["instances"]["failed"]) == (1, 1)
        assert sold_out["backoff"]["reason"] == "StockOut"
        assert sold_out["last_error"]["code"] == "STOCKOUT"
        assert "no capacity left" in sold_out["last_error"]["message"]
        if shape == "machines":  # our own creations, each with its age on the provider's clock
            kinds = {(op["kind"], op["state"]) for op in sold_out["operations"]}
            assert kinds == {("create", "failed")}
            assert all(op["age_seconds"] == 5.0 for op in sold_out["operations"])
        else:  # the cloud owns the size: its pool converges by itself, nothing of ours is in flight
            assert ok["operations"] == [] and ok["instances"]["creating"] == 2


def test_status_page_for_people_and_content_negotiation() -> None:
    with sim_server(_options("machines"), front="off") as handle:
        stub(channel(handle)).NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="ok", delta=1))
        page = requests.get(f"http://127.0.0.1:{handle.metrics_port}/status.html", timeout=5)
        negotiated = _status(handle.metrics_port, accept="text/html,application/xhtml+xml")
        for answer in (page, negotiated):
            assert answer.status_code == 200
            assert answer.headers["Content-Type"].startswith("text/html")
            assert "<td>sold-out</td>" in answer.text and "Operations in flight" in answer.text
        assert "sim://pending-" in page.text
        assert json.loads(_status(handle.metrics_port).text)["groups"][0]["id"] == "ok"


def test_status_page_says_when_the_data_was_fetched_and_reloads() -> None:
    """ "As of" is the last Refresh (when the cloud was listed), not when the page was drawn; the
    page reloads itself and links a reload."""
    with sim_server(_options("machines"), front="off") as handle:
        port = handle.metrics_port
        stub(channel(handle)).Refresh(pb.RefreshRequest())
        fetched = json.loads(_status(port).text)["last_refresh"]
        assert fetched and fetched.endswith("Z")
        page = requests.get(f"http://127.0.0.1:{port}/status.html", timeout=5).text
        assert f"Data as of the last Refresh: {fetched}. Page drawn " in page
        assert '<meta http-equiv="refresh" content="10">' in page and 'href="/status.html"' in page
