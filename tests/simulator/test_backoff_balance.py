"""Node-group backoff (5m doubling to 30m, reset after 3h) and balancing across similar groups.

Reproduces CA's exponential node-group backoff (`utils/backoff/exponential_backoff.go`) and its
balancing of similar groups (`processors/nodegroupset/balancing_processor.go`, `compare_nodegroups.go`:
same capacity within tolerance, same labels but the ignored ones, same taints)."""

import pytest

from cloudprovider_grpc.simulator.backoff import Backoff
from cloudprovider_grpc.simulator.engine.scale_up.orchestrator import (
    GroupView,
    balance,
    similar,
    within_ratio,
)
from cloudprovider_grpc.simulator.model import Taint
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions

from .helpers import shape

pytestmark = pytest.mark.unit


def test_backoff_doubles_to_the_max_and_resets():
    b = Backoff(300, 1800, 10800)
    assert b.fail("g", 0, "x") == 300  # 5m
    assert b.backed_off("g", 299) is not None
    assert b.backed_off("g", 300) is None
    assert b.fail("g", 400, "x") == 400 + 600  # 10m
    assert b.fail("g", 1100, "x") == 1100 + 1200  # 20m
    assert b.fail("g", 2400, "x") == 2400 + 1800  # 40m capped to 30m
    assert b.fail("g", 4300, "x") == 4300 + 1800
    # 3h after the last failure the next one starts over at 5m
    assert b.fail("g", 4300 + 10800, "x") == 4300 + 10800 + 300
    assert b.backed_off("other", 0) is None


def view(gid, target, max_size, tpl=None):
    t = tpl or shape(gid)
    return GroupView(gid, 0, max_size, target, t, dict(t.allocatable))


def test_balance_adds_to_the_smallest_group_first():
    # sizes a=3, b=1, c=2; 4 new nodes: b->2, then b/c tie at 2 -> b(first listed)... one at a time:
    # step1 b(1)->2; step2 b(2) vs c(2): b listed first -> b=3; step3 c(2)->3; step4 a,b,c all 3 -> a=4
    assert balance([view("a", 3, 10), view("b", 1, 10), view("c", 2, 10)], 4) == [
        ("a", 1),
        ("b", 2),
        ("c", 1),
    ]


def test_balance_respects_max_and_caps_the_total():
    # room: a 10-9 = 1, b 5-5 = 0 -> at most 1 node although 5 requested
    assert balance([view("a", 9, 10), view("b", 5, 5)], 5) == [("a", 1)]


def test_similarity_rules():
    opts = AutoscalerOptions()
    assert within_ratio(100, 99, 0.015) and not within_ratio(100, 98, 0.015)
    a = view("a", 1, 5, shape("a", cpu="4", memory="16Gi", labels={"zone-ish": "x"}))
    b = view("b", 1, 5, shape("b", cpu="4", memory="16Gi", labels={"zone-ish": "x"}))
    assert similar(a, b, opts)
    c = view("c", 1, 5, shape("c", cpu="8", memory="16Gi", labels={"zone-ish": "x"}))
    assert not similar(a, c, opts)  # different cpu capacity
    d = view("d", 1, 5, shape("d", cpu="4", memory="16Gi", labels={"zone-ish": "y"}))
    assert not similar(a, d, opts)  # labels differ
    assert similar(a, d, opts.model_copy(update={"balancing_ignore_label": ["zone-ish"]}))
    e = view("e", 1, 5, shape("e", cpu="4", memory="16Gi", labels={"zone-ish": "x"}, taints=(Taint("t"),)))
    assert not similar(a, e, opts)
    zone = view("z", 1, 5, shape("z", labels={"zone-ish": "x", "topology.kubernetes.io/zone": "b"}))
    assert similar(a, zone, opts)  # zone labels never matter
