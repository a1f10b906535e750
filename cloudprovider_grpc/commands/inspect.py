"""`groups`, `nodes`, `scale`, `delete`, `options`, `template`: a running server seen as
cluster-autoscaler sees it, over the same externalgrpc RPCs, with a table or JSON (`-o json`).

Exit codes, for scripts:

- 0: done;
- 1: the server answered with an error (INTERNAL, UNKNOWN, ...);
- 2: usage (a bad flag or argument; nothing was sent);
- 3: no such node group or node (NOT_FOUND);
- 4: the server could not be reached or did not answer in time (UNAVAILABLE, DEADLINE_EXCEEDED,
  a TLS failure);
- 5: the server refused the request (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE,
  RESOURCE_EXHAUSTED, PERMISSION_DENIED, UNAUTHENTICATED): a size beyond the group's bounds, a
  standby replica, a dry run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.protobuf.json_format import MessageToDict

from cloudprovider_grpc.grpcapi.wire import startup_bytes, startup_field, unknown_fields
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc
from cloudprovider_grpc.protos import k8s_pb2

EXIT_OK, EXIT_SERVER, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_UNREACHABLE, EXIT_REFUSED = 0, 1, 2, 3, 4, 5

_REFUSED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
}
_UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}

#: cluster-autoscaler's own flag defaults, sent as the `defaults` of NodeGroupGetOptions as CA 1.37
#: and later send them (scale-down thresholds 0.5, unneeded 10m, unready 20m, provisioning 15m,
#: startup 15m as field 11): the answer then shows what CA would use for the group
_CA_DEFAULTS = pb.NodeGroupAutoscalingOptions.FromString(
    pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5,
        scaleDownGpuUtilizationThreshold=0.5,
        scaleDownUnneededDuration=duration_pb2.Duration(seconds=600),
        scaleDownUnreadyDuration=duration_pb2.Duration(seconds=1200),
        MaxNodeProvisionDuration=duration_pb2.Duration(seconds=900),
    ).SerializeToString()
    + startup_bytes(900.0)
)

EPILOG = (
    "Exit codes: 0 done; 1 the server answered with an error; 2 usage; 3 no such node group or "
    "node; 4 server unreachable or too slow; 5 request refused (bounds, standby, dry run)."
)


class UsageError(Exception):
    """A bad argument found before anything was sent."""


def exit_code(code: grpc.StatusCode) -> int:
    """The exit status for a gRPC status code (see the module doc)."""
    if code == grpc.StatusCode.NOT_FOUND:
        return EXIT_NOT_FOUND
    if code in _UNREACHABLE:
        return EXIT_UNREACHABLE
    if code in _REFUSED:
        return EXIT_REFUSED
    return EXIT_SERVER


def _add_client_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server",
        default="127.0.0.1:8086",
        metavar="ADDRESS",
        help="the server's gRPC address, HOST:PORT or unix:///PATH (default 127.0.0.1:8086)",
    )
    p.add_argument("--tls-ca", type=Path, help="CA bundle that signed the server's certificate: enables TLS")
    p.add_argument("--tls-cert", type=Path, help="client certificate (PEM), for a server with mutual TLS")
    p.add_argument("--tls-key", type=Path, help="client private key (PEM)")
    p.add_argument("--tls-server-name", help="name to verify the server's certificate against")
    p.add_argument(
        "--timeout", type=float, default=5.0, help="seconds per call (default 5, as cluster-autoscaler)"
    )
    p.add_argument("-o", "--output", choices=["table", "json"], default="table", help="default table")


def channel(args: argparse.Namespace) -> grpc.Channel:
    """A channel to --server, with TLS when --tls-ca is given (the same files as CA's cloud-config)."""
    if args.tls_ca is None:
        if args.tls_cert or args.tls_key:
            raise UsageError("--tls-cert and --tls-key need --tls-ca (the CA that signed the server)")
        return grpc.insecure_channel(args.server)
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key must be given together")
    try:
        creds = grpc.ssl_channel_credentials(
            root_certificates=args.tls_ca.read_bytes(),
            private_key=args.tls_key.read_bytes() if args.tls_key else None,
            certificate_chain=args.tls_cert.read_bytes() if args.tls_cert else None,
        )
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    options = [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
    return grpc.secure_channel(args.server, creds, options=options)


# ------------------------------------------------------------------------------------ commands


def _groups(s: pb_grpc.CloudProviderStub, args: argparse.Namespace) -> Any:
    groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=args.timeout).nodeGroups
    rows = []
    for g in groups:
        target = s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=g.id), timeout=args.timeout)
        rows.append(
            {
                "id": g.id,
                "minSize": g.minSize,
                "maxSize": g.maxSize,
                "targetSize": target.targetSize,
                "debug": g.debug,
            }
        )
    return rows


def _nodes(s: pb_grpc.CloudProviderStub, args: argparse.Namespace) -> Any:
    resp = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=args.group), timeout=args.timeout)
    rows = []
    for inst in resp.instances:
        state = pb.InstanceStatus.InstanceState.Name(inst.status.instanceState)
        row: dict[str, Any] = {"id": inst.id, "state": state.removeprefix("instance").lower()}
        if inst.status.HasField("errorInfo"):
            err = inst.status.errorInfo
            row["error"] = {
                "code": err.errorCode,
                "message": err.errorMessage,
                "class": err.instanceErrorClass,
            }
        rows.append(row)
    return rows


def _parse_delta(text: str) -> int:
    if not text or text[0] not in "+-" or not text[1:].isdigit() or int(text[1:]) == 0:
        raise UsageError(f"{text!r} is not a size change: +N to add machines, -N to lower the target")
    return int(text)


def _scale(s: pb_grpc.CloudProviderStub, args: argparse.Namespace) -> Any:
    delta = _parse_delta(args.delta)
    ask = pb.NodeGroupTargetSizeRequest(id=args.group)
    before = s.NodeGroupTargetSize(ask, timeout=args.timeout).targetSize
    if delta > 0:
        s.NodeGroupIncreaseSize(
            pb.NodeGroupIncreaseSizeRequest(id=args.group, delta=delta), timeout=args.timeout
        )
    else:  # as CA: a negative delta, for machines not yet created (never deletes a node)
        s.NodeGroupDecreaseTargetSize(
            pb.NodeGroupDecreaseTargetSizeRequest(id=args.group, delta=delta), timeout=args.timeout
        )
    after = s.NodeGroupTargetSize(ask, timeout=args.timeout).targetSize
    return {"id": args.group, "delta": delta, "targetSizeBefore": before, "targetSize": after}


def _delete(s: pb_grpc.CloudProviderStub, args: argparse.Namespace) -> Any:
    # a provider id (scheme://...) is matched exactly, anything else as the node's name, as the
    # server matches CA's nodes
    nodes = [
        pb.ExternalGrpcNode(providerID=n, name="") if "://" in n else pb.ExternalGrpcNode(name=n)
        for n in args.node
    ]
    s.NodeGroupDeleteNodes(pb.NodeGroupDeleteNodesRequest(id=args.group, nodes=nodes), timeout=args.timeout)
    return {"id": args.group, "deleted": list(args.node)}


def _options(s: pb_grpc.CloudProviderStub, args: argparse.Namespace) -> Any:
    req = pb.NodeGroupAutoscalingOptionsRequest(id=args.group, defaults=_CA_DEFAULTS)
    try:
        resp = s.NodeGroupGetOptions(req, timeout=args.timeout)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        # an older server's way of saying "no per-group overrides": CA keeps its own flags
        return {"id": args.group, "options": None, "note": exc.details()}
    if not resp.HasField("nodeGroupAutoscalingOptions"):
        # no per-group overrides (an empty answer): every CA release keeps its own flags
        return {"id": args.group, "options": None, "note": "the server sent no options"}
    opts = resp.nodeGroupAutoscalingOptions
    startup, _ = startup_field(unknown_fields(opts.SerializeToString(), opts.DESCRIPTOR))
    return {
        "id": args.group,
        "options": {
            "scaleDownUtilizationThreshold": opts.scaleDownUtilizationThreshold,
            "scaleDownGpuUtilizationThreshold": opts.scaleDownGpuUtilizationThreshold,
            "scaleDownUnneededTime": f"{opts.scaleDownUnneededDuration.ToTimedelta().total_seconds():g}s",
            "scaleDownUnreadyTime": f"{opts.scaleDownUnreadyDuration.ToTimedelta().total_seconds():g}s",
            "maxNodeProvisionTime": f"{opts.MaxNodeProvisionDuration.ToTimedelta().total_seconds():g}s",
            "zeroOrMaxNodeScaling": opts.zeroOrMaxNodeScaling,
            "ignoreDaemonSetsUtilization": opts.ignoreDaemonSetsUtilization,
            "maxNodeStartupTime": None if startup is None else f"{startup.ToTimedelta().total_seconds():g}s",
        },
    }


def _template(s: pb_grpc.CloudProviderStub, args: argparse.Namespace) -> Any:
    resp = s.NodeGroupTemplateNodeInfo(
        pb.NodeGroupTemplateNodeInfoRequest(id=args.group), timeout=args.timeout
    )
    node = k8s_pb2.Node.FromString(resp.nodeBytes or resp.nodeInfo)
    return MessageToDict(node)


# ------------------------------------------------------------------------------------ output


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _text(command: str, result: Any) -> str:
    if command == "groups":
        keys = ("id", "minSize", "maxSize", "targetSize", "debug")
        return _table(("GROUP", "MIN", "MAX", "TARGET", "DEBUG"), [[g[k] for k in keys] for g in result])
    if command == "nodes":
        rows = [
            [n["id"], n["state"], f"{n['error']['code']}: {n['error']['message']}" if "error" in n else ""]
            for n in result
        ]
        return _table(("ID", "STATE", "ERROR"), rows)
    if command == "scale":
        return f"{result['id']}: target size {result['targetSizeBefore']} -> {result['targetSize']}"
    if command == "delete":
        return f"{result['id']}: deleting {', '.join(result['deleted'])}"
    if command == "options":
        if result["options"] is None:
            return f"{result['id']}: no per-group options; cluster-autoscaler uses its own flags"
        return _table(("OPTION", "VALUE"), sorted(result["options"].items()))
    meta, status = result.get("metadata", {}), result.get("status", {})
    lines = [f"name: {meta.get('name', '')}"]
    for title, entries in (("labels", meta.get("labels", {})), ("capacity", status.get("capacity", {}))):
        lines.append(f"{title}:")
        lines += [f"  {k}: {v['string'] if isinstance(v, dict) else v}" for k, v in sorted(entries.items())]
    taints = result.get("spec", {}).get("taints", [])
    lines.append("taints:" + ("" if taints else " none"))
    lines += [f"  {t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in taints]
    return "\n".join(lines)


COMMANDS: dict[str, tuple[str, Callable[[pb_grpc.CloudProviderStub, argparse.Namespace], Any]]] = {
    "groups": ("list node groups with their bounds and target sizes", _groups),
    "nodes": ("list a node group's instances and their states", _nodes),
    "scale": ("change a node group's target size: +N creates machines, -N lowers the target", _scale),
    "delete": ("delete nodes of a node group (provider ids or node names)", _delete),
    "options": ("show a node group's autoscaling options as cluster-autoscaler would get them", _options),
    "template": ("show the template node of a node group (what CA plans a new node with)", _template),
}


def run(args: argparse.Namespace) -> int:
    """Run one command against --server; the exit status of the module doc."""
    _, call = COMMANDS[args.command]
    try:
        with channel(args) as ch:
            result = call(pb_grpc.CloudProviderStub(ch), args)
    except UsageError as exc:
        print(f"cloudprovider-grpc {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        details: str = exc.details() or ""
        hint = _hint(args, details) if code == grpc.StatusCode.UNAVAILABLE else ""
        print(
            f"cloudprovider-grpc {args.command}: {args.server}: {code.name}: {details}{hint}", file=sys.stderr
        )
        return exit_code(code)
    if args.output == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(_text(args.command, result))
    return EXIT_OK


#: what gRPC's UNAVAILABLE details say when TLS, not the network, is the problem -> what to do
_TLS_HINTS = (
    (
        "CERTIFICATE_REQUIRED",
        "the server asks for a client certificate (mutual TLS): add --tls-cert and --tls-key",
    ),
    (
        "TSI_DATA_CORRUPTED",
        "the server asks for a client certificate (mutual TLS): add --tls-cert and --tls-key",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "the server's certificate is not signed by --tls-ca: give the CA that signed it",
    ),
    (
        "Hostname Verification",
        "the server's certificate does not name the host in --server: give the name it carries with "
        "--tls-server-name",
    ),
    (
        "handshake failed",
        "the TLS handshake failed: check --tls-ca, --tls-cert, --tls-key and --tls-server-name",
    ),
)


def _hint(args: argparse.Namespace, details: str) -> str:
    """A pointer to the flag to fix when a connection failed for TLS reasons (gRPC's text names the
    TLS library's error, not our flags), "" when it looks like the network."""
    if args.tls_ca is None and "Socket closed" in details:
        return (
            " (a server with TLS closes a plaintext connection: add --tls-ca, and --tls-cert and "
            "--tls-key for mutual TLS)"
        )
    if args.tls_ca is not None:
        for marker, hint in _TLS_HINTS:
            if marker.lower() in details.lower():
                return f" ({hint})"
    return ""


def add_commands(sub: Any) -> None:
    """Register the inspection commands on the top-level parser's subcommands."""
    for name, (help_text, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EPILOG)
        if name != "groups":
            p.add_argument(
                "group",
                metavar="GROUP",
                help="node group id, as `groups` lists it, or the cloud's name for the group",
            )
        if name == "scale":
            p.add_argument("delta", metavar="+N|-N", help="+N adds N machines, -N lowers the target by N")
        if name == "delete":
            p.add_argument("node", metavar="NODE", nargs="+", help="provider id (scheme://...) or node name")
        _add_client_flags(p)
        p.set_defaults(func=run)
