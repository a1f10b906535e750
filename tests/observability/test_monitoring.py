"""The alerts and the dashboard the chart ships: the PrometheusRule passes Prometheus' own
`promtool test rules` and says what docs/operating.md says; every dashboard query names metrics
(and labels) a real server exports, scraped over HTTP. Both are off unless asked for."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from cloudprovider_grpc.config.settings import load_settings
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.registry import build_provider
from cloudprovider_grpc.server.assembly import ServerHandle, start_server
from tests.deploy_support import crds
from tests.deploy_support.layouts import OUR_CHART, render_ours
from tests.deploy_support.tools import KUSTOMIZE, kustomize_build, run, tool
from tests.support import probes
from tests.support.backends import backend
from tests.support.clouds import VultrCloud
from tests.support.kubebuilds import debian_package
from tests.support.promql import Exposition, Selector, grafana_expand, selectors
from tests.support.servers import channel, sim_server, stub

ROOT = Path(__file__).resolve().parents[2]
OPERATING = ROOT / "docs" / "operating.md"
DASHBOARD = OUR_CHART / "dashboards" / "cloudprovider-grpc.json"
ALERT_TESTS = Path(__file__).parent / "alerts.test.yaml"
COMPONENT = ROOT / "manifests" / "monitoring"


def _promtool() -> Path:
    """Prometheus' own rule checker from Debian's `prometheus` package, unpacked into the user cache
    like etcd: seconds to fetch, where building it from its Go module (every service discovery's SDK)
    costs many minutes of a cold run."""
    return debian_package("prometheus", "promtool") / "usr" / "bin" / "promtool"


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


@functools.cache
def rule_object() -> dict[str, Any]:
    return only(render_ours("prometheusRule.enabled=true"), "PrometheusRule")


def rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_object()["spec"]["groups"] for r in g["rules"]}


def documented_alerts() -> dict[str, tuple[str, str]]:
    """alert name -> (expression, `for`) from the table in docs/operating.md."""
    section = OPERATING.read_text().split("## Alerts to set", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `(.+?)` \| (\S*) \|", section, re.M)
    return {name: (expr.replace("\\|", "|"), wait) for name, expr, wait in rows}


@pytest.mark.integration
def test_monitoring_objects_are_off_by_default() -> None:
    kinds = [(o["kind"], o["metadata"]["name"]) for o in render_ours()]
    assert not [k for k in kinds if k[0] == "PrometheusRule" or k[1].endswith("-dashboard")], kinds


@pytest.mark.integration
def test_prometheus_rule_is_valid_against_the_published_crd() -> None:
    obj = rule_object()
    crds.validate(obj)
    labelled = only(
        render_ours("prometheusRule.enabled=true", "prometheusRule.labels.release=kps"), "PrometheusRule"
    )
    assert labelled["metadata"]["labels"]["release"] == "kps"
    job = only(
        render_ours("prometheusRule.enabled=true", "prometheusRule.job=autoscaling/cpg"), "PrometheusRule"
    )
    assert 'up{job="autoscaling/cpg"} == 0' in job["spec"]["groups"][0]["rules"][0]["expr"]


@pytest.mark.integration
def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    """`promtool check rules` accepts them and every case of tests/observability/alerts.test.yaml holds."""
    promtool = _promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_object()["spec"]["groups"]}))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts.test.yaml")
    assert "SUCCESS" in run([promtool, "check", "rules", tmp_path / "rules.yaml"])
    run([promtool, "test", "rules", tmp_path / "alerts.test.yaml"], cwd=tmp_path)
    tested = set(re.findall(r"alertname: (\w+)", ALERT_TESTS.read_text()))
    assert tested == set(rules()), "an alert without a promtool case, or a case for no alert"


@pytest.mark.integration
def test_promtool_catches_a_broken_expectation(tmp_path: Path) -> None:
    """The promtool run above can fail: a case expecting the wrong severity is reported."""
    promtool = _promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_object()["spec"]["groups"]}))
    broken = ALERT_TESTS.read_text().replace(
        "severity: critical, job: cloudprovider-grpc, instance: a",
        "severity: warning, job: cloudprovider-grpc, instance: a",
    )
    (tmp_path / "alerts.test.yaml").write_text(broken)
    with pytest.raises(AssertionError, match="CloudProviderGrpcDown"):
        run([promtool, "test", "rules", tmp_path / "alerts.test.yaml"], cwd=tmp_path)


#: the labels that tell one server from another across Prometheus' targets (kubernetes-mixin's
#: convention: an aggregation keeps them, so one cluster's or job's series never merge with another's)
KEPT = ("cluster", "namespace", "job")


@pytest.mark.integration
def test_every_aggregation_keeps_cluster_namespace_and_job() -> None:
    for name, rule in rules().items():
        for op, by in re.findall(r"\b(sum|max|min|avg|count)\b\s*(by\s*\([^)]*\))?\s*\(", rule["expr"]):
            assert by, f"{name}: {op}() without by (...) merges every cluster and job"
            assert all(label in by for label in KEPT), (name, by)


@pytest.mark.integration
def test_every_alert_links_its_runbook_section_and_its_panel(tmp_path: Path) -> None:
    """runbook_url names a section of docs/operating.md that exists in the built site (mkdocs'
    heading ids, as GitHub's); dashboard_url, where given, names a panel of the dashboard."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    site = tmp_path / "site"
    subprocess.run(
        [str(mkdocs), "build", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        timeout=240,
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    page = (site / "operating" / "index.html").read_text()
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    panels = {p["id"] for p in dashboard()["panels"]}
    for name, rule in rules().items():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://") and url.split("#")[0].endswith("/docs/operating.md"), (name, url)
        anchor = url.split("#", 1)[1]
        assert anchor == name.lower() and anchor in ids, (name, anchor)
        dashboard_url = rule["annotations"].get("dashboard_url")
        if dashboard_url is not None:
            panel = int(dashboard_url.rsplit("viewPanel=", 1)[1])
            assert dashboard_url.startswith("/d/" + dashboard()["uid"] + "/") and panel in panels, name
    assert sum("dashboard_url" in r["annotations"] for r in rules().values()) >= 6
    moved = only(
        render_ours("prometheusRule.enabled=true", "prometheusRule.grafanaUrl=https://grafana.example/"),
        "PrometheusRule",
    )
    urls = [r["annotations"].get("dashboard_url") for g in moved["spec"]["groups"] for r in g["rules"]]
    assert "https://grafana.example/d/cloudprovider-grpc/cloudprovider-grpc?viewPanel=4" in urls


@pytest.mark.integration
def test_the_documented_alerts_are_the_shipped_rules() -> None:
    documented = documented_alerts()
    shipped = {name: (rule["expr"], rule.get("for", "")) for name, rule in rules().items()}
    assert documented == shipped


# ---------------------------------------------------------------------------------------------
# The dashboard


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) of every query, Grafana's variables expanded."""
    variables = {"datasource": "prometheus", "job": ".+", "cluster": ".*"}
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], grafana_expand(target["expr"], variables)))
    return found


def scrape(handle: ServerHandle) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{handle.metrics_port}/metrics", timeout=5) as resp:
        return resp.read().decode()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exposition:
    """What real servers' /metrics offer after answering CA's usual calls (one of them an error):
    the sim cloud, and Vultr's API emulator (so the cloud API families carry samples and labels)."""
    with sim_server() as handle:
        s = stub(channel(handle))
        s.NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="general", delta=1), timeout=5)
        with pytest.raises(grpc.RpcError):
            s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="missing"), timeout=5)
        s.Refresh(pb.RefreshRequest(), timeout=5)
        text = scrape(handle)
    cloud = VultrCloud(tmp_path_factory.mktemp("vultr"))
    try:
        settings = load_settings(
            Path(cloud.serve_args[-1]),
            {"provider": "vultr", "metrics_address": "127.0.0.1:0", "address": "127.0.0.1:0"},
        )
        handle = start_server(
            settings, provider=build_provider("vultr", settings.provider_context(env=dict(cloud.env)))
        )
        try:
            stub(channel(handle)).Refresh(pb.RefreshRequest(), timeout=5)
            text += scrape(handle)
        finally:
            handle.stop(grace=1)
    finally:
        cloud.stop()
    return Exposition.parse(text)


@pytest.mark.integration
def test_every_dashboard_query_names_exported_metrics(exported: Exposition) -> None:
    queries = panel_queries(dashboard())
    assert len(queries) >= 10
    problems = [
        f"{title}: {p}" for title, expr in queries for sel in selectors(expr) for p in exported.problems(sel)
    ]
    assert not problems, problems
    # the cluster and job variables list the values of a metric every server exports
    for name in ("cluster", "job"):
        (variable,) = [v for v in dashboard()["templating"]["list"] if v["name"] == name]
        definition = grafana_expand(variable["definition"], {"cluster": ".*"})
        (sel,) = selectors(re.sub(r"label_values\((.+), \w+\)", r"\1", definition))
        assert not exported.problems(sel), name


@pytest.mark.integration
def test_the_query_check_finds_a_misspelt_metric_or_label(exported: Exposition) -> None:
    assert exported.problems(Selector("cloudprovider_grpc_rpc_request_total", frozenset()))
    assert exported.problems(Selector("cloudprovider_grpc_rpc_requests_total", frozenset({"methd"})))
    assert not exported.problems(
        Selector("cloudprovider_grpc_rpc_requests_total", frozenset({"method", "job"}))
    )
    with pytest.raises(ValueError):
        selectors("sum(rate(cloudprovider_grpc_rpc_requests_total[5m])")


@pytest.mark.integration
def test_every_panel_has_a_unique_id_and_a_place() -> None:
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.integration
def test_dashboard_configmap_carries_the_sidecar_label_and_the_json() -> None:
    (cm,) = [o for o in render_ours("grafanaDashboard.enabled=true") if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["cloudprovider-grpc.json"]) == dashboard()
    moved = render_ours("grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring")
    assert only(moved, "ConfigMap")["metadata"]["namespace"] == "monitoring"


@pytest.mark.integration
def test_kustomize_component_ships_the_same_rules_and_dashboard() -> None:
    """manifests/monitoring, the optional component of the kustomize layouts, is the chart's."""
    tool(KUSTOMIZE)
    objects = kustomize_build(COMPONENT)
    rule = only(objects, "PrometheusRule")
    crds.validate(rule)
    assert rule["spec"] == rule_object()["spec"]
    cm = only(objects, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["cloudprovider-grpc.json"]) == dashboard()


@pytest.mark.integration
def test_a_server_without_leader_election_raises_no_leader_alert(tmp_path: Path) -> None:
    """A plain `serve` exports the leader gauges (0, and NaN for the renew age, as the Metrics
    table says); the chart without leader election ships no alert that 0 would raise. A process of
    its own: the gauges are the process's, and this test's worker may have run elections before."""
    server = probes.start_server(backend("sim"), tmp_path)
    try:
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    finally:
        server.close()
    assert "\ncloudprovider_grpc_leader 0.0\n" in text
    assert "\ncloudprovider_grpc_leader_last_renew_age_seconds NaN\n" in text
    single = only(
        render_ours("prometheusRule.enabled=true", "leaderElection.enabled=false", "replicas=1"),
        "PrometheusRule",
    )
    alerts = {r["alert"] for g in single["spec"]["groups"] for r in g["rules"]}
    assert "CloudProviderGrpcNoLeader" not in alerts and "CloudProviderGrpcDown" in alerts
    assert "CloudProviderGrpcNoLeader" in rules()
