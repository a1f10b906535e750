"""The scale-up orchestrator's filters and caps (plan_scale_up), by hand.

Reproduces CA's scale-up orchestrator (`core/scaleup/orchestrator/orchestrator.go`): pods grouped
by equivalence (`core/scaleup/equivalence/groups.go`), groups skipped when backed off, at max or over
the resource limits, the expander's choice, the new size capped by max size and `--max-nodes-total`."""

import random
from datetime import UTC, datetime

import pytest

from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup
from cloudprovider_grpc.simulator.engine.scale_up.expanders import Chain, ExpanderContext
from cloudprovider_grpc.simulator.engine.scale_up.orchestrator import GroupView, plan_scale_up
from cloudprovider_grpc.simulator.predicates import StaticFitCache
from cloudprovider_grpc.simulator.scenario import AutoscalerOptions

from .helpers import GI, pod_shape, shape

pytestmark = pytest.mark.unit


def view(gid, target=0, max_size=10, backed_off=None, tpl=True, **kw):
    t = shape(gid, **kw) if tpl else None
    return GroupView(gid, 0, max_size, target, t, dict(t.allocatable) if t else {}, backed_off)


def plan(pods, groups, nodes=0, cores=0, memory=0, expander="least-waste", **flags):
    """`cores` in whole cores, `memory` in bytes: what the cluster counts against the limits."""
    opts = AutoscalerOptions.model_validate(flags)
    ctx = ExpanderContext(random.Random(0), datetime(2026, 1, 1, tzinfo=UTC))
    used = {"cpu": cores, "memory": memory}
    return plan_scale_up(pods, groups, opts, Chain(expander), ctx, nodes, used, StaticFitCache())


TEN = [PodGroup(pod_shape(cpu="1", memory="1Gi"), 10)]  # 10 x 1 cpu -> 4 per 4-cpu node -> 3 nodes


def test_filters_skip_backed_off_full_and_templateless_groups():
    p = plan(
        TEN, [view("off", backed_off="x"), view("full", target=10), view("blank", tpl=False), view("ok")]
    )
    assert p.skipped == {"off": "backed off (x)", "full": "max limit reached", "blank": "no template"}
    assert p.increases == [("ok", 3)]


def test_group_max_caps_with_the_capping_line():
    p = plan(TEN, [view("g", target=8, max_size=10)])
    # need 3, room 10 - 8 = 2
    assert (p.needed, p.increases) == (3, [("g", 2)])
    assert "Capping size to MAX (10)" in p.lines


def test_max_nodes_per_scaleup_caps_the_estimate():
    p = plan(TEN, [view("g")], **{"max-nodes-per-scaleup": 2})
    assert p.increases == [("g", 2)] and p.best.pod_count == 8  # 2 nodes x 4 pods


def test_max_nodes_total():
    # 5 nodes exist, max 7 -> 2 more although 3 are needed
    p = plan(TEN, [view("g")], nodes=5, **{"max-nodes-total": 7})
    assert p.increases == [("g", 2)] and p.needed == 3
    assert "Capping size to max cluster total size (7)" in p.lines
    full = plan(TEN, [view("g")], nodes=7, **{"max-nodes-total": 7})
    assert full.increases == [] and full.reason == "max-nodes-total (7) reached"


def test_cores_and_memory_totals():
    # 10 cores in the cluster, max 12: a 4-cpu node would make 14 -> group skipped
    p = plan(TEN, [view("g")], cores=10, **{"cores-total": "0:12"})
    assert p.skipped == {"g": "exceeded quota: cores-total"} and p.increases == []
    # max 18 -> (18 - 10) // 4 = 2 nodes of the 3 needed
    p = plan(TEN, [view("g")], cores=10, **{"cores-total": "0:18"})
    assert p.increases == [("g", 2)]
    assert "Capping scale-up size due to lack of resources: 3 -> 2" in p.lines
    # memory-total in GiB: 40 GiB used, max 60 -> (60 - 40) // 16 = 1 node
    p = plan(TEN, [view("g")], memory=40 * GI, **{"memory-total": "0:60"})
    assert p.increases == [("g", 1)]


def test_balancing_splits_between_similar_groups():
    groups = [view("a", target=1), view("b", target=0), view("c", cpu="8")]
    # least-waste: a/b (4 cpu / 16Gi): 3 nodes, waste (12-10)/12 + (48-10)/48 = 0.1667 + 0.7917 = 0.958;
    # c (8 cpu / 16Gi): 8 pods per node -> 2 nodes, (16-10)/16 + (32-10)/32 = 1.0625 -> a or b (tie)
    # balancing the 3 nodes one at a time to the smallest group (ties to the chosen one, listed
    # first): b 0->1; a=1, b=1 tie; ...; either way a ends at 2 (+1) and b at 2 (+2)
    p = plan(TEN, groups, **{"balance-similar-node-groups": True})
    assert sorted(p.increases) == [("a", 1), ("b", 2)]
    assert any(line.startswith("Splitting scale-up between 2 similar node groups") for line in p.lines)
