"""The server's view, published: `/status` (JSON) and `/status.html` on the metrics port, and the
`cloudprovider-grpc-status` ConfigMap (kubereport.py).

Why: when cluster-autoscaler does something surprising, operators read its
`cluster-autoscaler-status` ConfigMap. This is the other half of that story, in the same places:
per group its bounds and target, its instances by state, the operations in flight and their age,
the back-off in force and the last cloud error, and who leads. Everything comes from memory (no
cloud call), and every text passes the secret redaction the logs and metrics pass.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cloudprovider_grpc import __version__
from cloudprovider_grpc.core.secrets import redact
from cloudprovider_grpc.providers.contract import CloudProvider, InstanceState

#: keys whose values move on their own (clock readings); a document that differs only in these is
#: unchanged, and the ConfigMap is not rewritten for it
VOLATILE = frozenset({"time", "age_seconds", "last_refresh"})


def _provider_view(provider: CloudProvider) -> dict[str, Any]:
    """The provider's own status, or one built from the RPC methods for a provider without one."""
    own = getattr(provider, "status", None)
    if callable(own):
        view: dict[str, Any] = own()
        return view
    groups = []
    for g in provider.node_groups():
        counts: dict[str, int] = {}
        for instance in provider.nodes(g.id):
            key = "failed" if instance.error is not None else InstanceState(instance.state).name.lower()
            counts[key] = counts.get(key, 0) + 1
        groups.append(
            {
                "id": g.id,
                "name": g.id,
                "min": g.min_size,
                "max": g.max_size,
                "target": provider.target_size(g.id),
                "instances": counts,
                "operations": [],
            }
        )
    return {"provider": provider.name, "groups": groups}


def snapshot(
    provider: CloudProvider,
    leader: Callable[[], dict[str, Any]] | None = None,
    *,
    wall: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """The whole status document: the provider's view, the leader, the version and the time."""
    doc = {
        "time": datetime.fromtimestamp(wall(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "version": __version__,
        **_provider_view(provider),
        "leader": {"enabled": False} if leader is None else {"enabled": True, **leader()},
    }
    return doc


def stable(value: Any) -> Any:
    """`value` without its VOLATILE keys (at every depth): what decides whether it changed."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def to_json(doc: dict[str, Any], *, indent: int | None = 2) -> str:
    """The document as JSON (compact with `indent=None`: the ConfigMap's copy), redacted."""
    separators = (",", ":") if indent is None else None
    return redact(json.dumps(doc, indent=indent, separators=separators))


#: the status page reloads itself this often: CA refreshes every 10 s by default (--scan-interval)
RELOAD_SECONDS = 10

_STYLE = (
    "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}.warn{color:#a40000}"
)


def to_html(doc: dict[str, Any]) -> str:
    """A small page for people: one table of groups, then the operations in flight."""

    def cell(value: Any) -> str:
        return f"<td>{html.escape(str(value))}</td>"

    rows = []
    ops = []
    for g in doc.get("groups", []):
        counts = ", ".join(f"{k} {v}" for k, v in g.get("instances", {}).items() if v)
        backoff = g.get("backoff")
        held = f"{backoff['reason']} until {backoff['until']}: {backoff['message']}" if backoff else ""
        error = g.get("last_error")
        last = f"{error['at']} {error['code']}: {error['message']}" if error else ""
        rows.append(
            "<tr>"
            + "".join(cell(v) for v in (g["id"], g.get("name", ""), g["min"], g["max"], g["target"], counts))
            + f'<td class="warn">{html.escape(held)}</td><td class="warn">{html.escape(last)}</td></tr>'
        )
        for op in g.get("operations", []):
            what = ", ".join(f"{k} {v}" for k, v in op.items() if k not in ("kind", "age_seconds"))
            ops.append(
                "<tr>"
                + "".join(cell(v) for v in (g["id"], op["kind"], what, op.get("age_seconds", "")))
                + "</tr>"
            )
    drawn = str(doc.get("time", ""))
    fetched = str(doc.get("last_refresh") or "none yet (cluster-autoscaler has not called Refresh)")
    leader = doc.get("leader", {})
    if leader.get("enabled"):
        who = (
            f"this replica: {leader.get('identity')}; leading: {'yes' if leader.get('leading') else 'no'}; "
            f"holder: {leader.get('holder') or '(none)'}; term: {leader.get('term')}; "
            f"Lease {leader.get('lease')}"
        )
    else:
        who = "leader election off (this server acts alone)"
    page = (
        "<!doctype html><html><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{RELOAD_SECONDS}">'
        f"<title>cloudprovider-grpc status</title><style>{_STYLE}</style></head><body>"
        f"<h1>cloudprovider-grpc {html.escape(str(doc.get('version', '')))}: "
        f"{html.escape(str(doc.get('provider', '')))}</h1>"
        f"<p>Data as of the last Refresh: {html.escape(fetched)}. Page drawn {html.escape(drawn)}; "
        f'it reloads every {RELOAD_SECONDS} s (<a href="/status.html">reload now</a>). {html.escape(who)}. '
        'The same as JSON: <a href="/status">/status</a>.</p>'
        "<h2>Node groups</h2><table><tr><th>id</th><th>name</th><th>min</th><th>max</th><th>target</th>"
        "<th>instances</th><th>back-off</th><th>last cloud error</th></tr>"
        + "".join(rows)
        + "</table><h2>Operations in flight</h2>"
        + (
            "<table><tr><th>group</th><th>kind</th><th>what</th><th>age (s)</th></tr>"
            + "".join(ops)
            + "</table>"
            if ops
            else "<p>None.</p>"
        )
        + "</body></html>"
    )
    return redact(page)


__all__ = ["VOLATILE", "snapshot", "stable", "to_html", "to_json"]
