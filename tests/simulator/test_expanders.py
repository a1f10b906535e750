"""Every expander and the chain, with hand-computed scores.

Reproduces CA's expanders (`expander/`: `waste/waste.go`, `price/price.go` with `preferred.go`,
`priority/priority.go`, least-nodes, most-pods, random) and the chain of `--expander=a,b`
(`expander/factory/chain.go`: each filters the options, ties go to the next, the last tie is random)."""

import math
import random
from datetime import UTC, datetime

import pytest

from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup
from cloudprovider_grpc.simulator.engine.scale_up.expanders import (
    Chain,
    ExpanderContext,
    LeastNodesExpander,
    LeastWasteExpander,
    MostPodsExpander,
    Option,
    PriceExpander,
    PriorityExpander,
    RandomExpander,
    node_unfitness,
    preferred_cpu_cores,
    price_score,
    waste_score,
)

from .helpers import pod_shape, shape

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ctx(**kw) -> ExpanderContext:
    return ExpanderContext(random.Random(kw.pop("seed", 0)), NOW, **kw)


def option(group: str, nodes: int, pods: int, cpu="1", memory="1Gi", tpl=None) -> Option:
    return Option(group, nodes, [PodGroup(pod_shape(cpu=cpu, memory=memory), pods)], tpl or shape(group))


def groups(options):
    return [o.group for o in options]


def test_most_pods_keeps_all_ties():
    opts = [option("a", 3, 10), option("b", 2, 12), option("c", 5, 12)]
    assert groups(MostPodsExpander().best_options(opts, ctx())) == ["b", "c"]


def test_least_nodes():
    opts = [option("a", 3, 10), option("b", 2, 12), option("c", 2, 1), option("d", 5, 12)]
    assert groups(LeastNodesExpander().best_options(opts, ctx())) == ["b", "c"]


def test_least_waste_uses_capacity_and_sums_cpu_and_memory_shares():
    # a: 2 nodes of 4 cpu/16Gi = 8 cpu/32Gi; 6 pods x (1 cpu, 1Gi) = 6 cpu/6Gi
    #    waste = (8-6)/8 + (32-6)/32 = 0.25 + 0.8125 = 1.0625
    a = option("a", 2, 6, tpl=shape("a", cpu="4", memory="16Gi"))
    # b: 1 node of 8 cpu/8Gi; same pods: (8-6)/8 + (8-6)/8 = 0.25 + 0.25 = 0.5
    b = option("b", 1, 6, tpl=shape("b", cpu="8", memory="8Gi"))
    assert waste_score(a) == pytest.approx(1.0625)
    assert waste_score(b) == pytest.approx(0.5)
    assert groups(LeastWasteExpander().best_options([a, b], ctx())) == ["b"]


def test_random_is_seeded_and_uniformish():
    opts = [option(g, 1, 1) for g in "abcd"]
    first = [RandomExpander().best_options(opts, ctx(seed=7))[0].group for _ in range(3)]
    again = [RandomExpander().best_options(opts, ctx(seed=7))[0].group for _ in range(3)]
    assert first == again
    c = ctx(seed=1)
    picks = {RandomExpander().best_options(opts, c)[0].group for _ in range(200)}
    assert picks == set("abcd")
    assert RandomExpander().best_options([], ctx()) == []


class TablePricing:
    """Prices from tables, as a server's Pricing RPCs would answer (None = the RPC failed)."""

    def __init__(self, node: dict[str, float | None], pod: float | None, stab: float | None = 0.05):
        self.node, self.pod, self.stab = node, pod, stab

    def node_price(self, template, start, end):
        return self.node.get(template.group)

    def pod_price(self, shape, start, end):
        return self.pod

    def stabilization_price(self, start, end):
        return self.stab


def test_price_preferred_node_and_unfitness():
    assert [preferred_cpu_cores(n) for n in (1, 2, 3, 6, 7, 20, 21, 60, 61, 200, 201)] == [
        1,
        1,
        2,
        2,
        4,
        4,
        8,
        8,
        16,
        16,
        32,
    ]
    assert node_unfitness(shape(cpu="4"), 2000) == 2.0  # max(2/4, 4/2)
    assert node_unfitness(shape(cpu="1"), 2000) == 2.0  # max(2/1, 1/2)
    assert node_unfitness(shape(cpu="8", extra={"nvidia.com/gpu": "1"}), 2000) == 1000.0


def test_price_scores_by_hand():
    # cluster of 3 nodes -> preferred node has 2 cpus
    # a: 4-cpu node at 0.2/h, N=2, 3 pods at 0.1 = 0.3, stab 0.05
    #    unfitness max(2/4, 4/2) = 2; suppressed = (2-1)*(1-tanh(1/15)) + 1 = 1.933426...
    #    score = 1.933426 * (0.2*2 + 0.05) / (0.3 + 0.05) = 2.485834...
    # b: 8-cpu node at 0.5/h, N=1, same pods: unfitness 4; suppressed = 3*(1-tanh(0)) + 1 = 4
    #    score = 4 * (0.5 + 0.05) / 0.35 = 6.285714...
    sa = (1 - math.tanh(1 / 15)) + 1
    assert price_score(0.2, 2, 0.3, 0.05, 2.0) == pytest.approx(sa * 0.45 / 0.35)
    assert price_score(0.5, 1, 0.3, 0.05, 4.0) == pytest.approx(4 * 0.55 / 0.35)
    a = option("a", 2, 3, tpl=shape("a", cpu="4"))
    b = option("b", 1, 3, tpl=shape("b", cpu="8"))
    c = ctx(cluster_size=3, pricing=TablePricing({"a": 0.2, "b": 0.5}, pod=0.1))
    assert groups(PriceExpander().best_options([a, b], c)) == ["a"]
    # make a's nodes expensive: a = 1.9334*(2*2+0.05)/0.35 = 22.37 > b = 6.29
    c = ctx(cluster_size=3, pricing=TablePricing({"a": 2.0, "b": 0.5}, pod=0.1))
    assert groups(PriceExpander().best_options([a, b], c)) == ["b"]


def test_price_drops_unpriced_options_and_needs_pricing():
    a = option("a", 1, 1)
    b = option("b", 1, 1)
    c = ctx(pricing=TablePricing({"a": None, "b": 0.5}, pod=0.1))
    assert groups(PriceExpander().best_options([a, b], c)) == ["b"]
    assert PriceExpander().best_options([a, b], ctx(pricing=TablePricing({"a": 1, "b": 1}, pod=None))) == []
    assert PriceExpander().best_options([a, b], ctx(pricing=None)) == []


PRIOS = {10: ["^general$"], 50: ["spot-.*"], 30: ["gpu"]}


def test_priority_highest_matching_wins_and_unmatched_are_dropped():
    opts = [option(g, 1, 1) for g in ("general", "spot-a", "spot-b", "other")]
    assert groups(PriorityExpander().best_options(opts, ctx(priorities=PRIOS))) == ["spot-a", "spot-b"]
    # without the spot groups, general (10) loses to gpu-large (30: regex "gpu" matches anywhere)
    opts = [option(g, 1, 1) for g in ("general", "gpu-large", "other")]
    assert groups(PriorityExpander().best_options(opts, ctx(priorities=PRIOS))) == ["gpu-large"]


def test_priority_without_any_match_passes_everything():
    opts = [option(g, 1, 1) for g in ("x", "y")]
    assert groups(PriorityExpander().best_options(opts, ctx(priorities=PRIOS))) == ["x", "y"]


def test_chain_filters_until_one_left_then_random():
    # priority leaves spot-a and spot-b (both 50); least-waste then prefers spot-b:
    # spot-a: 1 node 4cpu/16Gi for 3 pods (3 cpu, 3Gi): 0.25 + 13/16 = 1.0625
    # spot-b: 1 node 4cpu/4Gi: 0.25 + 0.25 = 0.5
    opts = [
        option("general", 1, 3, tpl=shape("general", cpu="4", memory="4Gi")),
        option("spot-a", 1, 3, tpl=shape("spot-a", cpu="4", memory="16Gi")),
        option("spot-b", 1, 3, tpl=shape("spot-b", cpu="4", memory="4Gi")),
    ]
    assert Chain("priority,least-waste").best_option(opts, ctx(priorities=PRIOS)).group == "spot-b"
    # least-waste alone: general and spot-b tie at 0.5 -> seeded random picks one of them
    picked = Chain("least-waste").best_option(opts, ctx(seed=3)).group
    assert picked in ("general", "spot-b")
    assert Chain("least-waste").best_option(opts, ctx(seed=3)).group == picked
    assert Chain("least-waste").best_option([], ctx()) is None


@pytest.mark.parametrize(
    "spec, message",
    [
        ("random,least-waste", "follow"),
        ("least-waste,least-waste", "once"),
        ("cheapest", "unknown"),
        ("", "empty"),
    ],
)
def test_chain_rejects_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        Chain(spec)


def test_the_chain_says_why_it_dropped_every_option_it_did_not_choose():
    """The decision record's `considered` list: each other option with the expander that dropped
    it, what that expander preferred, and the expander's own figure for it."""
    a = option("a", 2, 6, tpl=shape("a", cpu="4", memory="16Gi"))
    b = option("b", 1, 6, tpl=shape("b", cpu="8", memory="8Gi"))
    c = option("c", 1, 2, tpl=shape("c", cpu="8", memory="8Gi"))
    context = ctx()
    chosen = Chain("most-pods,least-waste").best_option([a, b, c], context)
    assert chosen is b
    assert context.rejected["c"] == "most-pods expander preferred a, b"
    assert context.rejected["a"] == "least-waste expander preferred b (a wasted score 1.0625)"
    assert "b" not in context.rejected
    tie = ctx(seed=1)
    picked = Chain("least-nodes").best_option([b, c], tie)
    other = "c" if picked is b else "b"
    assert tie.rejected == {other: f"random expander preferred {picked.group}"}
