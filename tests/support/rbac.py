"""Waiting for an RBAC grant to apply on the suite's control plane.

kube-apiserver's RBAC authorizer reads Roles and bindings from its informers' cache, so a call made
right after they were created can still be refused: a test that just granted something waits,
with `wait_allowed`, until the authorizer itself says yes (`kubectl auth can-i`) before it relies
on the grant (counts refusals, or expects none).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.controlplane import ControlPlane
from tests.support.waits import poll


@dataclass(frozen=True)
class Grant:
    """One thing an identity may do: `kubectl auth can-i VERB RESOURCE [-n NAMESPACE]`'s words
    (RESOURCE as `leases.coordination.k8s.io`, or `configmaps/NAME` for a named one)."""

    verb: str
    resource: str
    namespace: str = ""


def grants(objects: Sequence[Mapping[str, Any]]) -> list[Grant]:
    """One Grant per binding among RBAC `objects` (as applied): its role's first rule, first verb,
    resource and name, in the binding's namespace. A binding and its role each reach the
    authorizer's cache whole, so one grant per binding shows when all of them apply."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}
    found = []
    for o in objects:
        if o["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = o["metadata"].get("namespace", "")
        ref = o["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        rule = role["rules"][0]
        group = rule.get("apiGroups", [""])[0]
        resource = rule["resources"][0] + (f".{group}" if group else "")
        if rule.get("resourceNames"):
            resource += f"/{rule['resourceNames'][0]}"
        found.append(Grant(rule["verbs"][0], resource, namespace))
    return found


def wait_allowed(plane: ControlPlane, kubeconfig: Path, *wanted: Grant, timeout: float = 30) -> None:
    """Until the identity of `kubeconfig` may do each of `wanted`, as the authorizer answers."""

    def allowed(grant: Grant) -> bool:
        scope = ["-n", grant.namespace] if grant.namespace else []
        can_i = ["auth", "can-i", grant.verb, grant.resource, *scope]
        return plane.kubectl(*can_i, kubeconfig=kubeconfig, check=False).returncode == 0

    for grant in wanted:
        poll(functools.partial(allowed, grant), timeout, f"{kubeconfig.name} allowed {grant}", interval=0.1)
