"""What a PromQL query asks of a server's metrics, and what a real server's /metrics offers.

Queries are parsed by a real PromQL parser (the `promql-parser` package, bindings to the Rust parser
Grafana's and GreptimeDB's tooling use), not matched with regular expressions; the exposition is
parsed by the Prometheus client's own text-format parser. Grafana's `$variables` are replaced by
what Grafana would put there before a query is parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import promql_parser
from prometheus_client.parser import text_string_to_metric_families

#: Grafana's built-in interval variables, as Grafana expands them for a 30 s scrape interval
GRAFANA_INTERVALS = {"$__rate_interval": "2m", "$__interval": "30s", "$__range": "6h"}
#: labels Prometheus gives a scraped series, not the server: job and instance from the target,
#: namespace from a ServiceMonitor's relabelling, cluster from external labels (multi-cluster setups)
TARGET_LABELS = frozenset({"job", "instance", "namespace", "cluster"})


@dataclass(frozen=True)
class Selector:
    """One series selector of a query: the metric it names and the labels it matches on."""

    metric: str
    labels: frozenset[str]


def grafana_expand(expr: str, variables: dict[str, str]) -> str:
    """`expr` with Grafana's variables replaced (`$job`, `${job}`, `$__rate_interval`)."""
    for name, value in GRAFANA_INTERVALS.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables[m.group(1) or m.group(2)], expr)


def selectors(expr: str) -> list[Selector]:
    """Every series selector in a PromQL expression (raises ValueError when it does not parse)."""
    tree = promql_parser.parse(expr)
    found: list[Selector] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            names = frozenset(m.name for m in node.matchers.matchers if m.name != "__name__")
            if not node.name:
                raise ValueError(f"selector without a metric name in {expr!r}")
            found.append(Selector(node.name, names))
        return True

    promql_parser.walk(tree, visit)
    return found


@dataclass
class Exposition:
    """The series names a /metrics page offers, and the label names seen on each."""

    series: set[str] = field(default_factory=set)
    labels: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Exposition:
        out = cls()
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count", ""),
            "info": ("_info",),
        }
        for family in text_string_to_metric_families(text):
            # a family with no sample yet (no label set observed) is still exported: its names follow
            # from its type
            for suffix in suffixes.get(family.type, ("",)):
                out.series.add(family.name + suffix)
            for sample in family.samples:
                out.series.add(sample.name)
                out.labels.setdefault(sample.name, set()).update(sample.labels)
        return out

    def problems(self, selector: Selector) -> list[str]:
        """Why a selector would find nothing here (empty when its metric and labels exist)."""
        if selector.metric not in self.series:
            return [f"{selector.metric}: not exported"]
        seen = self.labels.get(selector.metric)
        if seen is None:  # exported without samples in this scrape: its labels are unknown
            return []
        unknown = selector.labels - seen - TARGET_LABELS
        return [f"{selector.metric}: no label {name!r}" for name in sorted(unknown)]
