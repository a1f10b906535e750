"""docs/deploying.md states facts about our chart (replicas, update strategy, the token, RBAC, the
disruption budget): each is compared with what `helm template` renders, for the default values and
for the one-replica variant the page describes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy_support.layouts import render_ours

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "deploying.md").read_text()


def chart_section() -> str:
    start = PAGE.index("What the chart creates, by default")
    return PAGE[start : PAGE.index("## 5.", start)]


def kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def facts(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = kinds(objects, "Deployment")
    (account,) = kinds(objects, "ServiceAccount")
    (pdb,) = kinds(objects, "PodDisruptionBudget")
    pod = deployment["spec"]["template"]["spec"]
    strategy = deployment["spec"]["strategy"]
    verbs = {
        (tuple(r.get("resources", ())), tuple(r.get("resourceNames", ())), v)
        for role in kinds(objects, "Role")
        for r in role["rules"]
        for v in r["verbs"]
    }
    return {
        "replicas": deployment["spec"]["replicas"],
        "strategy": strategy["type"],
        "rolling": strategy.get("rollingUpdate"),
        "token": pod.get("automountServiceAccountToken", account.get("automountServiceAccountToken", True)),
        "verbs": verbs,
        "cluster_roles": len(kinds(objects, "ClusterRole")),
        "node_rules": [r for c in kinds(objects, "ClusterRole") for r in c["rules"]],
        "max_unavailable": pdb["spec"]["maxUnavailable"],
    }


def test_the_default_chart_is_as_the_page_says() -> None:
    text = chart_section()
    got = facts(render_ours())
    stated = int(re.search(r"a Deployment of \*\*(\d+) replicas\*\*", text).group(1))  # type: ignore[union-attr]
    assert got["replicas"] == stated
    strategy = re.search(
        r"with the \*\*`(\w+)`\*\* strategy \(`maxSurge: (\d+)`,\s+`maxUnavailable: (\d+)`", text
    )
    assert strategy, "the strategy sentence changed shape"
    assert got["strategy"] == strategy.group(1)
    assert got["rolling"] == {"maxSurge": int(strategy.group(2)), "maxUnavailable": int(strategy.group(3))}
    assert got["token"] is True and "**whose API token is mounted**" in text
    lease = next(v for v in got["verbs"] if v[0] == ("leases",) and v[1])[1]  # the one Lease the Role names
    status = ("cloudprovider-grpc-status",)
    assert got["verbs"] == {
        (("leases",), (), "create"),
        (("leases",), lease, "get"),
        (("leases",), lease, "update"),
        (("leases",), lease, "watch"),
        (("pods",), (), "get"),
        (("pods",), (), "patch"),
        (("configmaps",), (), "create"),
        (("configmaps",), status, "get"),
        (("configmaps",), status, "update"),
        (("events",), (), "create"),
        (("events",), (), "patch"),
    }
    flat = " ".join(text.split())
    assert "may `create` Leases and `get`, `update`, `watch` the one Lease" in flat
    assert "and `get`, `patch` pods" in flat
    assert "may `create` ConfigMaps, `get`, `update` the one ConfigMap `cloudprovider-grpc-status`" in flat
    assert "and `create`, `patch` Events" in flat
    assert got["cluster_roles"] == 1 and "one ClusterRole, which may only `get` Nodes" in flat
    assert got["node_rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    stated_pdb = int(re.search(r"PodDisruptionBudget with \*\*`maxUnavailable: (\d+)`\*\*", text).group(1))  # type: ignore[union-attr]
    assert got["max_unavailable"] == stated_pdb


def test_the_one_replica_variant_is_as_the_page_says() -> None:
    text = " ".join(chart_section().split())
    m = re.search(
        r"With `(--set [^`]+)` it runs one replica with the `(\w+)` strategy, no Role and no mounted token",
        text,
    )
    assert m, "the one-replica sentence changed shape"
    flags = re.findall(r"--set (\S+)", m.group(1))
    got = facts(render_ours(*flags))
    assert got["replicas"] == 1 and got["strategy"] == m.group(2)
    assert got["verbs"] == set() and got["token"] is False


def test_the_optional_objects_the_page_names_exist() -> None:
    text = chart_section()
    for flag, kind in (
        ("serviceMonitor.enabled=true", "ServiceMonitor"),
        ("prometheusRule.enabled=true", "PrometheusRule"),
        ("grafanaDashboard.enabled=true", "ConfigMap"),
    ):
        assert f"--set {flag}" in text, flag
        assert not kinds(render_ours(), kind) or kind == "ConfigMap"
        assert kinds(render_ours(flag), kind), flag
