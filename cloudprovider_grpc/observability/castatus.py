"""The status document in cluster-autoscaler's shape, for the `cloudprovider-grpc-status` ConfigMap.

Why: operators read CA's own `cluster-autoscaler-status` ConfigMap with `kubectl ... -o
jsonpath='{.data.status}' | yq ...`. Since CA 1.30 that key holds YAML of CA's
`ClusterAutoscalerStatus` (kubernetes/autoscaler, cluster-autoscaler/clusterstate/api/types.go at
cluster-autoscaler-1.36.1: `time`, `autoscalerStatus`, `nodeGroups[].name`,
`nodeGroups[].health.{cloudProviderTarget,minSize,maxSize}`, `nodeGroups[].scaleUp.{status,
backoffInfo.{errorCode,errorMessage}}`), stamped in Go's default time layout
(clusterstate/utils/status.go, `time.Now().String()`-style `2006-01-02 15:04:05.999999999 -0700
MST`). Ours uses the same key, format, names and paths wherever the concept is the same, so those
habits carry over; what CA has no word for (instances by state, operations in flight, the cloud's
name for a group, the leader) keeps our names beside them. docs/operating.md lists both side by side.

The group's bounds and target are also given flat (`nodeGroups[].cloudProviderTarget`, ...): one
`yq` path that needs no knowledge of CA's health condition.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml

from cloudprovider_grpc.core.secrets import redact


def go_time(wall: float) -> str:
    """`wall` (Unix seconds) as Go prints a UTC time.Time (layout `2006-01-02 15:04:05.999999999
    -0700 MST`: the fraction without trailing zeros, no dot when it is zero). To the microsecond:
    a float of Unix seconds holds no finer digit truthfully."""
    ns = round(wall * 1_000_000) * 1000
    seconds, fraction = divmod(ns, 1_000_000_000)
    digits = f"{fraction:09d}".rstrip("0")
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp}{'.' + digits if digits else ''} +0000 UTC"


def _scale_up(group: dict[str, Any]) -> dict[str, Any]:
    """CA's scale-up condition of a group: Backoff with CA's backoffInfo while one is in force,
    InProgress while machines are on their way, else NoActivity."""
    backoff = group.get("backoff")
    if backoff:
        return {
            "status": "Backoff",
            "backoffInfo": {
                "errorCode": backoff.get("reason", ""),
                "errorMessage": backoff.get("message", ""),
            },
            "backoffUntil": backoff.get("until", ""),
        }
    creating = group.get("instances", {}).get("creating", 0)
    return {"status": "InProgress" if creating else "NoActivity"}


def _group(group: dict[str, Any]) -> dict[str, Any]:
    healthy = not group.get("listing_error") and not group.get("instances", {}).get("failed")
    bounds = {
        "cloudProviderTarget": group.get("target", 0),
        "minSize": group.get("min", 0),
        "maxSize": group.get("max", 0),
    }
    out: dict[str, Any] = {
        "name": group["id"],  # CA's name for a group is its id (NodeGroup.Id())
        **bounds,
        "health": {"status": "Healthy" if healthy else "Unhealthy", **bounds},
        "scaleUp": _scale_up(group),
        "displayName": group.get("name") or group["id"],
        "instances": group.get("instances", {}),
        "operations": group.get("operations", []),
    }
    if group.get("last_error"):
        out["lastCloudError"] = group["last_error"]
    if group.get("listing_error"):
        out["listingError"] = group["listing_error"]
    return out


def ca_shaped(doc: dict[str, Any], wall: float) -> dict[str, Any]:
    """The status document (status.snapshot) with CA's field names and time format."""
    return {
        "time": go_time(wall),
        "autoscalerStatus": "Running",
        "provider": doc.get("provider", ""),
        "version": doc.get("version", ""),
        "nodeGroups": [_group(g) for g in doc.get("groups", [])],
        "leader": doc.get("leader", {"enabled": False}),
    }


def to_yaml(doc: dict[str, Any], wall: float) -> str:
    """The ConfigMap's `status` value: CA's shape as YAML, in a stable key order, redacted."""
    return redact(yaml.safe_dump(ca_shaped(doc, wall), sort_keys=False, default_flow_style=False))


__all__ = ["ca_shaped", "go_time", "to_yaml"]
