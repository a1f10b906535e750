"""The report's tables from a report's dict: the decision table (every decision, groups by name,
the groups a scale-up considered), the values at every change, series.csv; and compare.csv/html
with the baseline first and the decisions that differ from it."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime

import pytest

from cloudprovider_grpc.simulator.compare_report import differing, figures, render, write_csv
from cloudprovider_grpc.simulator.report import Decision, Report
from cloudprovider_grpc.simulator.report_tables import changes_table, decision_table, named, series

pytestmark = pytest.mark.unit

UUID = "e3e70682-c209-4cac-a29f-6fbed82c07cd"


def report(decisions: list[Decision], nodes: list[int], price: float = 0.5) -> Report:
    n = len(nodes)
    node_s = sum(nodes[i] * 10 for i in range(n - 1))
    return Report(
        scenario="s",
        seed=0,
        provider="vultr",
        start_time=datetime(2026, 1, 1, tzinfo=UTC),
        options={},
        decisions=decisions,
        timeline={
            "t": [10.0 * i for i in range(n)],
            "nodes": {UUID: nodes},
            "unready": {UUID: [0] * n},
            "target": {UUID: [None, *nodes[1:]]},
            "pending": [3, *([0] * (n - 1))],
            "groups": {UUID: {"name": "general", "min_size": 0, "max_size": 9}},
        },
        cost={"total": price * node_s / 3600, "per_group": {UUID: price * node_s / 3600}, "unit": "USD"},
        summary={"node_hours": node_s / 3600, "pod_pending_seconds": {"p50": 10.0, "p99": 20.0, "max": 20.0}},
    )


UP = Decision(
    0.0,
    0,
    "scale-up",
    UUID,
    2,
    reason=f"binpacking needs 2 node(s) of {UUID}",
    inputs={
        "considered": [{"group": UUID, "node_count": 2, "pods": 3, "verdict": "chosen"}],
        "skipped_groups": {"gpu": "max limit reached"},
    },
)


def test_the_decision_table_has_every_decision_with_groups_by_name() -> None:
    down = Decision(30.0, 3, "scale-down", UUID, -1, node="n1", reason="empty")
    html = decision_table(report([UP, down], [1, 3, 3, 2]).to_dict())
    rows = re.findall(r'<tr data-kind="([^"]+)"', html)
    assert rows == ["scale-up", "scale-down"]
    assert UUID not in html.replace(f'title="{UUID}"', "")
    assert "binpacking needs 2 node(s) of general" in html
    assert "<b>general</b>: chosen (2 node(s) for 3 pod(s))" in html
    assert "<b>gpu</b>: skipped, max limit reached" in html
    assert named(f"{UUID} and {UUID}", {UUID: "general"}) == "general and general"


def test_series_has_a_row_per_loop_and_ends_at_the_reports_cost() -> None:
    data = report([UP], [1, 3, 3, 2]).to_dict()
    header, rows = series(data)
    assert header == ["t_seconds", "time", "pending_pods", "nodes[general]", "unready[general]",
                      "target[general]", "cost_so_far"]  # fmt: skip
    assert [r[3] for r in rows] == [1, 3, 3, 2] and rows[0][5] == ""
    assert float(rows[-1][-1]) == pytest.approx(data["cost"]["total"], abs=1e-6)
    # the values table keeps only the loops where something changed
    assert changes_table(data).count("<tr><td>") == 3


def test_compare_lists_the_baseline_first_and_the_decisions_that_differ(tmp_path) -> None:
    base = report([UP], [1, 3, 3, 2])
    other = report([UP, Decision(20.0, 2, "scale-down", UUID, -1, node="n1", reason="empty")], [1, 3, 2, 2])
    only_base, only_other = differing(base, other)
    assert only_base == [] and [d.kind for d in only_other] == ["scale-down"]
    assert figures(other)["node_hours"] < figures(base)["node_hours"]
    page = render(["baseline", "quick"], [base, other])
    assert re.findall(r"<tr[^>]*><td>(\w+)</td>", page.split('id="variants"')[1].split("</table>")[0]) == [
        "baseline",
        "quick",
    ]
    assert "quick: 1 decision(s) the baseline did not make, 0 it made that quick did not" in page
    write_csv(["baseline", "quick"], [base, other], tmp_path / "compare.csv")
    rows = list(csv.reader(io.StringIO((tmp_path / "compare.csv").read_text())))
    assert [r[0] for r in rows] == ["variant", "baseline", "quick"] and "node_hours" in rows[0]
