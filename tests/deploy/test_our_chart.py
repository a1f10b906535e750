"""Our own chart, deploy/helm/cloudprovider-grpc: `helm lint --strict`, its values.schema.json
accepting the defaults and refusing bad values at install, its README documenting every value, and
its switches (image digest, your own TLS Secret, an existing issuer, optional objects, another
release name) rendered and checked."""

from __future__ import annotations

import json
import re
import shlex

import jsonschema
import pytest
import yaml

from tests.deploy_support import crds
from tests.deploy_support.layouts import (
    CHART_EXAMPLE_SETTINGS,
    NAMESPACE,
    OUR_CHART,
    OUR_RELEASE,
    our_chart_variants,
    render_ours,
)
from tests.deploy_support.pods import ContainerView, container, flag_value
from tests.deploy_support.rendered import (
    CHART_BACKENDS,
    OUR_CONTAINER,
    SCHEMA_VERSIONS,
    our_args,
    our_workload,
    validate,
)
from tests.deploy_support.tools import helm_template, helm_template_error, parse_stream, run, tool
from tests.support.kubebuilds import HELM

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_our_chart_lints_strictly() -> None:
    out = run([tool(HELM), "lint", "--strict", OUR_CHART])
    assert "0 chart(s) failed" in out, out
    for backend in CHART_BACKENDS:
        run([tool(HELM), "lint", "--strict", OUR_CHART, "--set", f"provider={backend}"])
    for values in our_chart_variants().values():
        run([tool(HELM), "lint", "--strict", OUR_CHART, "--values", values])


def test_our_chart_renders_with_helms_own_default_cluster_version() -> None:
    """`helm template` exactly as the docs print it, without --kube-version: a helm built with `go
    install` (no release ldflags) assumes Kubernetes v1.20 and must still render the chart."""
    out = run([tool(HELM), "template", OUR_RELEASE, OUR_CHART, "--namespace", NAMESPACE])
    kinds = {doc["kind"] for doc in parse_stream(out)}
    assert {"Deployment", "Service", "NetworkPolicy"} <= kinds, kinds


def test_our_chart_values_schema_accepts_the_defaults() -> None:
    schema = json.loads((OUR_CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((OUR_CHART / "values.yaml").read_text()))
    assert schema["properties"]["provider"]["enum"] == CHART_BACKENDS


def test_our_chart_readme_documents_every_value() -> None:
    """`helm show readme` lists every top-level value of values.yaml, and shows a tested command."""
    readme = run([tool(HELM), "show", "readme", OUR_CHART])
    rows = "\n".join(line for line in readme.splitlines() if line.startswith("| `"))
    documented = set(re.findall(r"`(\w+)`", rows))
    values = set(yaml.safe_load((OUR_CHART / "values.yaml").read_text()))
    assert values <= documented, sorted(values - documented)
    (command,) = [shlex.split(line) for line in readme.splitlines() if line.startswith("helm install ")]
    settings = tuple(command[i + 1] for i, a in enumerate(command) if a == "--set")
    provider = settings[0].partition("=")[2]
    assert settings[1:] == CHART_EXAMPLE_SETTINGS[provider], (
        "the chart README's command is not the tested one"
    )


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("provider=aws", "provider"),
        ("nodes={10:1}", "nodes"),
        ("grpcPort=0", "grpcPort"),
        ("tls.mode=none", "mode"),
        ("tls.mode=secret", "name"),
        ("tls.certManager.duration=90d", "duration"),
        ("backends.cherry.env[0].secret=Not_A_Name", "secret"),
        ("networkPolicy.enabled=maybe", "enabled"),
        ("replicas=0", "replicas"),
        ("logLevel=verbose", "logLevel"),
        ("image.digest=sha256:abc", "digest"),
        ("groupOptions.pool1.max_node_startup_tme=20m", "max_node_startup_tme"),
        ("groupOptions.pool1.scale_down_utilization_threshold=2", "scale_down_utilization_threshold"),
    ],
)
def test_our_chart_refuses_bad_values_at_install(setting: str, named: str) -> None:
    """values.schema.json stops `helm install` before anything is created, naming the value."""
    error = helm_template_error(OUR_CHART, set_values=[setting])
    assert "values don't meet the specifications of the schema" in error, error
    assert named in error, error


def test_our_chart_pins_the_image_by_digest() -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    objects = render_ours(
        f"image.digest={digest}", "image.repository=registry.example.com/cloudprovider-grpc"
    )
    ours = container(our_workload(objects), OUR_CONTAINER)
    assert ours["image"] == f"registry.example.com/cloudprovider-grpc@{digest}"


def test_our_chart_with_your_own_tls_secret() -> None:
    objects = render_ours("tls.mode=secret", "tls.secret.name=my-grpc-tls")
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects)
    mount, rel = view.mount_path_of(flag_value(our_args(objects), "--tls-cert") or "") or ({}, "")
    assert rel == "tls.crt" and view.volumes[mount["name"]]["secret"]["secretName"] == "my-grpc-tls"
    for obj in objects:
        validate(obj, SCHEMA_VERSIONS[-1])


def test_our_chart_with_an_existing_issuer() -> None:
    objects = render_ours(
        "tls.certManager.issuerRef.name=corp-ca", "tls.certManager.issuerRef.kind=ClusterIssuer"
    )
    assert not [o for o in objects if o["kind"] == "Issuer"]
    leaves = [o for o in objects if o["kind"] == "Certificate"]
    assert len(leaves) == 2
    for cert in leaves:
        assert cert["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}
        crds.validate(cert)


def test_our_chart_optional_objects_switch_off() -> None:
    objects = render_ours("networkPolicy.enabled=false", "podDisruptionBudget.enabled=false")
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"NetworkPolicy", "PodDisruptionBudget", "ServiceMonitor"}
    assert {"Deployment", "Service", "ServiceAccount", "Certificate"} <= kinds
    default_kinds = {o["kind"] for o in render_ours()}
    assert {"NetworkPolicy", "PodDisruptionBudget"} <= default_kinds


def test_our_chart_release_name_follows_through() -> None:
    """Another release name renames every object, and the server certificate follows the Service."""
    objects = helm_template(OUR_CHART, release="edge", namespace="autoscaling", set_values=["provider=sim"])
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["metadata"]["name"] == "edge-cloudprovider-grpc"
    server = next(
        o for o in objects if o["kind"] == "Certificate" and "server auth" in o["spec"].get("usages", [])
    )
    assert "edge-cloudprovider-grpc.autoscaling.svc" in server["spec"]["dnsNames"]
    # the one exception: Events of Nodes live in `default` (Kubernetes keeps cluster-scoped objects' there)
    assert all(
        o["metadata"].get("namespace") in (None, "autoscaling")
        or (
            o["metadata"]["name"] == "edge-cloudprovider-grpc-node-events"
            and o["metadata"]["namespace"] == "default"
        )
        for o in objects
    )


def test_our_chart_passes_group_options_as_the_servers_config_file(tmp_path) -> None:
    """`groupOptions` becomes a ConfigMap the server reads with `--config` (a checksum of it rolls the
    pods); the file it mounts is one the server loads as those options. Without the value, none."""
    from cloudprovider_grpc.config.settings import load_settings

    objects = render_ours(
        *CHART_EXAMPLE_SETTINGS["cherry"], "provider=cherry",
        "groupOptions.pool2.max_node_startup_time=20m", "groupOptions.pool2.scale_down_unneeded_time=300",
    )  # fmt: skip
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects)
    path = flag_value(our_args(objects), "--config") or ""
    mount, key = view.mount_path_of(path) or ({}, "")
    name = view.volumes[mount["name"]]["configMap"]["name"]
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    text = config_map["data"][key]

    def checksum(rendered: list) -> str:
        return our_workload(rendered)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    changed = render_ours(
        *CHART_EXAMPLE_SETTINGS["cherry"], "provider=cherry", "groupOptions.pool2.max_node_startup_time=25m"
    )
    assert re.fullmatch("[0-9a-f]{64}", checksum(objects)) and checksum(changed) != checksum(objects)
    (tmp_path / "config.yaml").write_text(text)
    settings = load_settings(tmp_path / "config.yaml", {"provider": "sim"})
    assert settings.group_options == {
        "pool2": {"max_node_startup_time": 1200.0, "scale_down_unneeded_time": 300.0}
    }
    for obj in objects:
        validate(obj, SCHEMA_VERSIONS[-1])

    plain = render_ours(*CHART_EXAMPLE_SETTINGS["cherry"], "provider=cherry")
    assert flag_value(our_args(plain), "--config") is None
    assert not [o for o in plain if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
