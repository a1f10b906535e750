"""Expanders: which node group a scale-up grows when several could help.

Each expander narrows a list of options (sigs-CA `pkg/expander/`); `Chain` applies them in the
order of `--expander=a,b,c` and falls back to `random`, exactly like
`pkg/expander/factory/chain.go`: a filter that leaves one option decides; an empty list means no
scale-up.
- `random` (`random/random.go`): one option, uniformly, from a seeded RNG so runs repeat.
- `most-pods` (`mostpods/mostpods.go`): the options scheduling the most pods.
- `least-nodes` (`leastnodes/leastnodes.go`): the options needing the fewest nodes.
- `least-waste` (`waste/waste.go`): lowest (idle cpu share + idle memory share) of the new nodes'
  *capacity*, i.e. (cap*N - requested)/(cap*N) summed over cpu and memory. Exact ties are kept.
- `price` (`price/price.go`, `price/preferred.go`): score =
  suppressed_unfitness * (node_price*N + stab) / (sum(pod prices) + stab), prices for the next hour,
  stab = price of a 500m / 500Mi pod, unfitness = max(pref_cpu/node_cpu, node_cpu/pref_cpu)
  (1000 for GPU nodes), suppressed as (u-1)*(1-tanh((N-1)/15))+1; preferred cpu is 1/2/4/8/16/32
  cores for clusters of <=2/6/20/60/200/more nodes. Options whose pricing fails are dropped.
- `priority` (`priority/priority.go`): the ConfigMap's regexes (unanchored, like Go's MatchString)
  over group ids; options at the highest matching priority win; options matching nothing are
  dropped; if nothing matches at all, every option passes through.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from cloudprovider_grpc.simulator.engine.scale_up.estimator import PodGroup
from cloudprovider_grpc.simulator.model import CPU, GPU_RESOURCE, MEMORY, NodeShape, PodShape


@dataclass
class Option:
    """One way to scale up: grow `group` by `node_count` template nodes to run `pods`."""

    group: str
    node_count: int
    pods: list[PodGroup]
    template: NodeShape
    exists: bool = True
    debug: str = ""

    @property
    def pod_count(self) -> int:
        return sum(g.count for g in self.pods)


class Pricing(Protocol):
    """Prices for the price expander (the Pricing RPCs); None means the call failed."""

    def node_price(self, template: NodeShape, start: datetime, end: datetime) -> float | None: ...

    def pod_price(self, shape: PodShape, start: datetime, end: datetime) -> float | None: ...

    def stabilization_price(self, start: datetime, end: datetime) -> float | None: ...


@dataclass
class ExpanderContext:
    rng: random.Random
    now: datetime
    cluster_size: int = 0
    pricing: Pricing | None = None
    priorities: Mapping[int, Sequence[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: option's group -> why the chain dropped it (which expander, what it preferred, its score)
    rejected: dict[str, str] = field(default_factory=dict)


class Expander(Protocol):
    name: str

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]: ...


class RandomExpander:
    name = "random"

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]:
        if not options:
            return []
        return [options[ctx.rng.randrange(len(options))]]


def _keep_best(options: list[Option], score: dict[int, float], lower_is_better: bool) -> list[Option]:
    if not options:
        return []
    pick = min if lower_is_better else max
    best = pick(score[id(o)] for o in options)
    return [o for o in options if score[id(o)] == best]


class MostPodsExpander:
    name = "most-pods"

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]:
        return _keep_best(options, {id(o): o.pod_count for o in options}, lower_is_better=False)


class LeastNodesExpander:
    name = "least-nodes"

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]:
        return _keep_best(options, {id(o): o.node_count for o in options}, lower_is_better=True)


def waste_score(option: Option) -> float:
    """waste.go: (availCPU-reqCPU)/availCPU + (availMem-reqMem)/availMem over node *capacity*."""
    req_cpu = sum(g.shape.requests.get(CPU, 0) * g.count for g in option.pods)
    req_mem = sum(g.shape.requests.get(MEMORY, 0) * g.count for g in option.pods)
    avail_cpu = option.template.capacity.get(CPU, 0) * option.node_count
    avail_mem = option.template.capacity.get(MEMORY, 0) * option.node_count
    score = 0.0
    if avail_cpu:
        score += (avail_cpu - req_cpu) / avail_cpu
    if avail_mem:
        score += (avail_mem - req_mem) / avail_mem
    return score


class LeastWasteExpander:
    name = "least-waste"

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]:
        scores = {id(o): waste_score(o) for o in options}
        for o in options:
            ctx.notes.append(f"least-waste: {o.group} wasted score {scores[id(o)]:.4f}")
        return _keep_best(options, scores, lower_is_better=True)


def preferred_cpu_cores(cluster_size: int) -> int:
    """preferred.go SimplePreferredNodeProvider: node size doubles as the cluster triples."""
    for limit, cores in ((2, 1), (6, 2), (20, 4), (60, 8), (200, 16)):
        if cluster_size <= limit:
            return cores
    return 32


def node_unfitness(template: NodeShape, preferred_milli: int) -> float:
    if template.capacity.get(GPU_RESOURCE, 0) > 0:
        return 1000.0  # gpuUnfitnessOverride
    node_milli = template.capacity.get(CPU, 0)
    if node_milli <= 0:
        return 1000.0
    return max(preferred_milli / node_milli, node_milli / preferred_milli)


def price_score(
    node_price: float, node_count: int, pod_prices: float, stab: float, unfitness: float, exists: bool = True
) -> float:
    suppressed = (unfitness - 1.0) * (1.0 - math.tanh((node_count - 1) / 15.0)) + 1.0
    score = suppressed * (node_price * node_count + stab) / (pod_prices + stab)
    return score if exists else score * 2.0  # notExistCoeficient


class PriceExpander:
    name = "price"

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]:
        if ctx.pricing is None:
            ctx.notes.append("price: no pricing available; no option can be priced")
            return []
        start, end = ctx.now, ctx.now + timedelta(hours=1)
        stab = ctx.pricing.stabilization_price(start, end)
        if stab is None:
            ctx.notes.append("price: stabilization pod price failed")
            return []
        preferred = preferred_cpu_cores(ctx.cluster_size) * 1000
        scores: dict[int, float] = {}
        priced: list[Option] = []
        for o in options:
            node_price = ctx.pricing.node_price(o.template, start, end)
            if node_price is None:
                ctx.notes.append(f"price: node price for {o.group} failed; option dropped")
                continue
            pod_total = 0.0
            failed = False
            for g in o.pods:
                p = ctx.pricing.pod_price(g.shape, start, end)
                if p is None:
                    failed = True
                    break
                pod_total += p * g.count
            if failed:
                ctx.notes.append(f"price: pod price for {o.group} failed; option dropped")
                continue
            unfit = node_unfitness(o.template, preferred)
            scores[id(o)] = price_score(node_price, o.node_count, pod_total, stab, unfit, o.exists)
            ctx.notes.append(
                f"price: {o.group} node price {node_price:.4f}x{o.node_count}, pods {pod_total:.4f}, "
                f"unfitness {unfit:.3f}, score {scores[id(o)]:.6f}"
            )
            priced.append(o)
        return _keep_best(priced, scores, lower_is_better=True)


class PriorityExpander:
    name = "priority"

    def best_options(self, options: list[Option], ctx: ExpanderContext) -> list[Option]:
        compiled = {prio: [re.compile(p) for p in pats] for prio, pats in ctx.priorities.items()}
        best: list[Option] = []
        best_prio: int | None = None
        for o in options:
            matched = [prio for prio, pats in compiled.items() if any(p.search(o.group) for p in pats)]
            if not matched:
                ctx.notes.append(
                    f"priority: node group {o.group} not found in priority expander configuration"
                )
                continue
            prio = max(matched)
            if best_prio is None or prio > best_prio:
                best_prio, best = prio, [o]
            elif prio == best_prio:
                best.append(o)
        if not best:
            ctx.notes.append("priority: no priorities info found for any of the expansion options")
            return list(options)
        return best


_EXPANDERS: dict[str, type] = {
    e.name: e
    for e in (
        RandomExpander,
        MostPodsExpander,
        LeastNodesExpander,
        LeastWasteExpander,
        PriceExpander,
        PriorityExpander,
    )
}


class Chain:
    """`--expander=a,b,c` (factory/chain.go), with `random` as the final fallback."""

    def __init__(self, spec: str) -> None:
        names = [n.strip() for n in spec.split(",") if n.strip()]
        if not names:
            raise ValueError("empty expander list")
        if len(set(names)) != len(names):
            raise ValueError(f"expander {spec!r}: an expander may appear only once")
        if "random" in names[:-1]:
            raise ValueError(f"expander {spec!r}: nothing may follow 'random'")
        unknown = [n for n in names if n not in _EXPANDERS]
        if unknown:
            raise ValueError(f"unknown expander(s): {', '.join(unknown)}")
        self.names = names
        self.filters = [_EXPANDERS[n]() for n in names if n != "random"]
        self.fallback = RandomExpander()

    def best_option(self, options: list[Option], ctx: ExpanderContext) -> Option | None:
        """The chosen option; every other one gets its reason in `ctx.rejected` (the expander that
        dropped it, the options it kept, and the expander's own figure for it when it logs one)."""
        current = list(options)
        for f in self.filters:
            seen = len(ctx.notes)
            kept = f.best_options(current, ctx)
            self._reject(f.name, current, kept, ctx.notes[seen:], ctx)
            current = kept
            if len(current) == 1:
                return current[0]
        chosen = self.fallback.best_options(current, ctx)
        self._reject("random", current, chosen, [], ctx)
        return chosen[0] if chosen else None

    @staticmethod
    def _reject(
        name: str, before: list[Option], kept: list[Option], notes: list[str], ctx: ExpanderContext
    ) -> None:
        winners = ", ".join(o.group for o in kept) or "no option"
        for o in before:
            if any(k is o for k in kept):
                continue
            own = [n.split(": ", 1)[1] for n in notes if f" {o.group} " in f" {n} "]
            why = f"{name} expander preferred {winners}"
            ctx.rejected[o.group] = why + (f" ({'; '.join(own)})" if own else "")
