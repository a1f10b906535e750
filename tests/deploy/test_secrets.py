"""Each cloud reads the Secrets (names and keys) its in-tree cluster-autoscaler provider used,
unchanged and nothing else, so a migration keeps the user's Secrets; no layout carries a Secret;
and each cloud's example Secrets hold what its layouts read."""

from __future__ import annotations

import pytest

from tests.deploy_support.pods import ContainerView, flag_value
from tests.deploy_support.rendered import (
    LAYOUTS,
    OUR_CONTAINER,
    RUNNABLE,
    example_secrets,
    our_args,
    our_workload,
    rendered,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: The Secrets (name, key) each in-tree provider read, as its upstream examples define them
#: (../shared/research: cherry-spc.md, vultr-exoscale.md, alicloud.md). Our containers read these
#: and nothing else, so a migration keeps the user's Secrets unchanged.
IN_TREE_SECRETS: dict[str, set[tuple[str, str]]] = {
    "sim": set(),
    "cherry": {
        ("cluster-autoscaler-cherry", "authtoken"),
        ("cluster-autoscaler-cloud-config", "cloud-config"),
        ("bootstrap-token-cluster-autoscaler-cherry", "token-id"),
        ("bootstrap-token-cluster-autoscaler-cherry", "token-secret"),
    },
    "vultr": {("cluster-autoscaler-cloud-config", "cloud-config")},
    "exoscale": {
        ("exoscale-api-credentials", "api-key"),
        ("exoscale-api-credentials", "api-secret"),
        ("exoscale-api-credentials", "api-zone"),
    },
    "alicloud": {
        ("cloud-config", key)
        for key in (
            "access-key-id",
            "access-key-secret",
            "region-id",
            # the RRSA (OIDC) variant's keys
            "oidc-provider-arn",
            "oidc-token-file-path",
            "role-arn",
            "session-name",
        )
    },
    "spc": {("stackpointio", k) for k in ("api-token", "api-url", "organization-id", "cluster-id")},
}


def cloud_secrets_read(view: ContainerView) -> set[tuple[str, str]]:
    """(Secret, key) pairs our container reads for the cloud: all it reads but its TLS Secret."""
    tls_file = flag_value(view.args, "--tls-cert")
    hit = view.mount_path_of(tls_file) if tls_file else None
    tls_secret = view.volumes[hit[0]["name"]]["secret"]["secretName"] if hit else None
    return {ref for ref in secrets_read(view) if ref[0] != tls_secret}


def secrets_read(view: ContainerView) -> set[tuple[str, str]]:
    """(Secret, key) pairs a container reads, through env and through mounted Secret volumes."""
    refs = {
        (v["valueFrom"]["secretKeyRef"]["name"], v["valueFrom"]["secretKeyRef"]["key"])
        for v in view.container.get("env") or []
        if "secretKeyRef" in (v.get("valueFrom") or {})
    }
    for mount in view.container.get("volumeMounts") or []:
        source = view.volumes[mount["name"]].get("secret")
        if source:
            items = source.get("items") or [{"key": "*"}]
            refs.update((source["secretName"], item["key"]) for item in items)
    return refs


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_cloud_reads_its_in_tree_secrets_unchanged(layout: str) -> None:
    """Our container reads the Secret names and keys of the cloud's in-tree provider, nothing else;
    no layout carries a Secret (applying it never overwrites the user's real ones)."""
    objects = rendered(layout)
    backend = LAYOUTS[layout].backend
    assert flag_value(our_args(objects), "--provider") == backend
    view = ContainerView(our_workload(objects), OUR_CONTAINER, objects)
    read = cloud_secrets_read(view)
    assert read <= IN_TREE_SECRETS[backend], sorted(read - IN_TREE_SECRETS[backend])
    assert bool(read) == bool(IN_TREE_SECRETS[backend]), f"{backend}: reads no cloud credentials"
    required = [
        v["name"]
        for v in view.container.get("env") or []
        if "secretKeyRef" in (v.get("valueFrom") or {}) and not v["valueFrom"]["secretKeyRef"].get("optional")
    ]
    if backend == "cherry":
        assert required == ["CHERRY_AUTH_TOKEN"], required
    assert not [o for o in objects if o["kind"] == "Secret"]


@pytest.mark.parametrize("layout", [n for n in RUNNABLE if LAYOUTS[n].backend != "sim"])
def test_example_secrets_hold_what_the_layout_reads(layout: str) -> None:
    backend = LAYOUTS[layout].backend
    secrets = example_secrets(layout)
    have = {
        (o["metadata"]["name"], k) for o in secrets for k in {**o.get("data", {}), **o.get("stringData", {})}
    }
    view = ContainerView(our_workload(rendered(layout)), OUR_CONTAINER, rendered(layout))
    wanted = cloud_secrets_read(view)
    assert wanted <= have, sorted(wanted - have)
    assert {o["metadata"]["name"] for o in secrets} == {name for name, _ in IN_TREE_SECRETS[backend]}
