"""The `cloudprovider-grpc` command: serve, check-config, emulate, simulate, build-front, version, and
groups, nodes, scale, delete, options, template to look into a running server.

Invalid configuration prints one line naming the offending key and exits with status 2 before
anything starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

from cloudprovider_grpc.grpcapi.memory import limit_malloc_arenas

# before grpc is imported: its core starts threads of its own, and glibc fixes the arena limit when
# the first of them allocates
limit_malloc_arenas()
# also before grpc is imported (its core reads it once): the core logs its own lines to stderr (a
# port in use, a failed TLS handshake) beside the one line we print for the same failure;
# GRPC_VERBOSITY=error (or debug) brings them back
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from cloudprovider_grpc import __version__  # noqa: E402
from cloudprovider_grpc.core.errors import ConfigError  # noqa: E402
from cloudprovider_grpc.observability import logs  # noqa: E402

EXIT_CONFIG = 2

#: The variables each cloud reads its credentials from, as its in-tree provider did (named in
#: `serve --help`; a test checks each backend really reads them). Every cloud also accepts them as
#: files in CLOUDPROVIDER_GRPC_SECRETS_DIR.
CREDENTIAL_VARIABLES: dict[str, tuple[str, ...]] = {
    "cherry": ("CHERRY_AUTH_TOKEN", "BOOTSTRAP_TOKEN_ID", "BOOTSTRAP_TOKEN_SECRET"),
    "vultr": ("VULTR_API_KEY",),
    "exoscale": ("EXOSCALE_API_KEY", "EXOSCALE_API_SECRET", "EXOSCALE_ZONE"),
    "alicloud": ("ACCESS_KEY_ID", "ACCESS_KEY_SECRET", "REGION_ID", "ALIBABA_CLOUD_ROLE_ARN"),
    "spc": ("CLUSTER_API_TOKEN", "SPC_API_BASE_URL", "ORGANIZATION_ID", "CLUSTER_ID"),
}

#: Every other variable each cloud reads: API endpoints, discovery, the in-tree providers' options
#: and older names kept as fallbacks (also named in `serve --help` and each cloud's page; a test
#: checks the lists against what the backends read).
SETTING_VARIABLES: dict[str, tuple[str, ...]] = {
    "cherry": ("CHERRY_API_URL", "CHERRY_MANAGER", "CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL"),
    "vultr": ("VULTR_API_URL",),
    "exoscale": (
        "EXOSCALE_API_ENDPOINT",
        "EXOSCALE_API_ENVIRONMENT",
        "EXOSCALE_SKS_CLUSTER",
        "EXOSCALE_INSTANCE_POOLS",
    ),
    "alicloud": (
        "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
        "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
        "ALIBABA_CLOUD_SESSION_NAME",
        "ALICLOUD_ROLE_ARN",
        "ALICLOUD_OIDC_PROVIDER_ARN",
        "ALICLOUD_OIDC_TOKEN_FILE_PATH",
        "ALICLOUD_SESSION_NAME",
        "ALICLOUD_ESS_ENDPOINT",
        "ALICLOUD_ECS_ENDPOINT",
        "ALICLOUD_VPC_ENDPOINT",
        "ALICLOUD_STS_ENDPOINT",
        "METADATA_ENDPOINT",
    ),
    "spc": ("SPC_BASE_API_URL", "SPC_NODE_POOLS_FILE"),
}

TOP_LEVEL_EPILOG = "Needs Python 3.11 or newer. `cloudprovider-grpc COMMAND --help` shows a command's flags."


def _server_epilog() -> str:
    clouds = "; ".join(f"{cloud}: {', '.join(names)}" for cloud, names in CREDENTIAL_VARIABLES.items())
    others = "; ".join(f"{cloud}: {', '.join(names)}" for cloud, names in SETTING_VARIABLES.items())
    return (
        "Settings come from, highest first: flags; environment variables CLOUDPROVIDER_GRPC_<KEY> "
        "(the YAML key in upper case, nested keys joined by __, e.g. CLOUDPROVIDER_GRPC_TLS__CERT); "
        "files in CLOUDPROVIDER_GRPC_SECRETS_DIR (one file per setting or credential variable); the "
        f"YAML file of --config (or CLOUDPROVIDER_GRPC_CONFIG). Cloud credentials: {clouds} "
        f"(--emulate needs none). Other variables the clouds read: {others}. Traces: the standard "
        "OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, OTEL_SERVICE_NAME, ...) "
        "with the otel extra installed."
    )


def _add_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="YAML config file (env CLOUDPROVIDER_GRPC_CONFIG)")
    p.add_argument("--provider", help="backend: sim (default), cherry, vultr, exoscale, alicloud, spc")
    p.add_argument(
        "--address",
        help="gRPC listen address HOST:PORT (default 127.0.0.1:8086; :8086 = all interfaces), or a unix "
        "socket unix:///PATH (its directory must exist)",
    )
    p.add_argument(
        "--socket-mode",
        metavar="MODE",
        help="octal permissions of the unix socket of --address unix:///PATH (default 0660)",
    )
    p.add_argument(
        "--allow-plaintext",
        action="store_true",
        default=None,
        help="allow gRPC without TLS on an address beyond loopback (logged as a warning)",
    )
    p.add_argument(
        "--metrics-address", help="metrics and /healthz HTTP address (default 127.0.0.1:8087; '' disables)"
    )
    p.add_argument(
        "--nodes", action="append", metavar="MIN:MAX:NAME", help="node group, as CA's --nodes (repeatable)"
    )
    p.add_argument(
        "--cloud-config", type=Path, help="the in-tree provider's cloud-config file, reused verbatim"
    )
    p.add_argument("--cluster-name", help="cluster name (in-tree --cluster-name)")
    p.add_argument(
        "--emulate",
        action="store_true",
        default=None,
        help="serve against the backend's bundled API emulator",
    )
    p.add_argument("--tls-cert", type=Path, help="server certificate (PEM)")
    p.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    p.add_argument("--tls-ca", type=Path, help="CA bundle for client certificates: enables mutual TLS")
    p.add_argument(
        "--state-file", type=Path, help="journal of accepted scale operations, resumed after a restart"
    )
    p.add_argument("--concurrency", type=int, help="parallel cloud operations (default 10)")
    p.add_argument(
        "--grace-period", type=float, help="seconds in-flight work may take at shutdown (default 10)"
    )
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default info")
    p.add_argument(
        "--log-format", choices=["json", "text"], help="json (default: one object per line) or text"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=None,
        help="list the cloud and answer CA, but never write to the cloud: each write is logged and counted",
    )
    _add_leader_flags(p)
    p.add_argument(
        "--front",
        choices=["auto", "on", "off"],
        help="compiled front for the per-node read RPCs: auto (default: when built), on, off",
    )


def _bool(text: str) -> bool:
    """A Go-style boolean flag value (`--leader-elect=false`)."""
    value = text.strip().lower()
    if value in ("1", "t", "true", "yes"):
        return True
    if value in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


#: the leader-election flags, named as cluster-autoscaler's (settings key -> flag)
LEADER_FLAGS = {
    "lease_duration": "--leader-elect-lease-duration",
    "renew_deadline": "--leader-elect-renew-deadline",
    "retry_period": "--leader-elect-retry-period",
    "resource_name": "--leader-elect-resource-name",
    "resource_namespace": "--leader-elect-resource-namespace",
}


def _add_leader_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--leader-elect",
        nargs="?",
        const=True,
        type=_bool,
        metavar="BOOL",
        help="run as one of several replicas: only the holder of a Kubernetes Lease acts (default false)",
    )
    p.add_argument("--leader-elect-lease-duration", metavar="DURATION", help="Lease duration (default 15s)")
    p.add_argument(
        "--leader-elect-renew-deadline",
        metavar="DURATION",
        help="how long the leader retries renewing before it stops acting (default 10s)",
    )
    p.add_argument(
        "--leader-elect-retry-period", metavar="DURATION", help="time between Lease attempts (default 2s)"
    )
    p.add_argument(
        "--leader-elect-resource-name", metavar="NAME", help="the Lease's name (default cloudprovider-grpc)"
    )
    p.add_argument(
        "--leader-elect-resource-namespace",
        metavar="NAMESPACE",
        help="the Lease's namespace (default: the pod's own)",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig for the Lease and --kube-status (default: the pod's service account)",
    )
    p.add_argument(
        "--kube-status",
        nargs="?",
        const=True,
        type=_bool,
        metavar="BOOL",
        help="write the ConfigMap cloudprovider-grpc-status and record Kubernetes Events on it and on "
        "Nodes (needs API access; default false)",
    )
    p.add_argument(
        "--kube-status-namespace",
        metavar="NAMESPACE",
        help="namespace of the status ConfigMap and its Events (default: the pod's own)",
    )


def _settings(args: argparse.Namespace) -> Any:
    from cloudprovider_grpc.config.settings import load_settings

    def flag(name: str) -> Any:
        return getattr(args, name, None)

    overrides: dict[str, Any] = {
        "provider": flag("provider") if args.command != "emulate" else args.cloud,
        "address": args.address if args.command != "emulate" else None,
        "metrics_address": flag("metrics_address"),
        "socket_mode": flag("socket_mode"),
        "allow_plaintext": flag("allow_plaintext"),
        "nodes": flag("nodes"),
        "cloud_config": flag("cloud_config"),
        "cluster_name": flag("cluster_name"),
        "emulate": flag("emulate"),
        "state_file": flag("state_file"),
        "concurrency": flag("concurrency"),
        "grace_period": flag("grace_period"),
        "log_level": flag("log_level"),
        "log_format": flag("log_format"),
        "front": flag("front"),
    }
    overrides["dry_run"] = flag("dry_run")
    overrides["kube_status"] = flag("kube_status")
    overrides["kube_status_namespace"] = flag("kube_status_namespace")
    leader = {key: flag(f"leader_elect_{key}") for key in LEADER_FLAGS}
    leader["enabled"] = flag("leader_elect")
    leader["kubeconfig"] = flag("kubeconfig")
    if any(v is not None for v in leader.values()):
        overrides["leader_elect"] = {k: v for k, v in leader.items() if v is not None}
    tls = {"cert": flag("tls_cert"), "key": flag("tls_key"), "ca": flag("tls_ca")}
    if any(v is not None for v in tls.values()):
        overrides["tls"] = {k: v for k, v in tls.items() if v is not None}
    return load_settings(args.config, overrides)


def cmd_serve(args: argparse.Namespace) -> int:
    from cloudprovider_grpc.server.assembly import ServerStartError, serve_forever

    settings = _settings(args)
    logs.setup(settings.log_level, settings.log_format)
    try:
        code = serve_forever(settings)
    except ServerStartError as exc:
        print(f"cloudprovider-grpc: {exc}", file=sys.stderr)
        return 1
    # the grace period is a hard bound: threads still blocked on the cloud must not keep the process
    # alive (interpreter exit would join them), so leave at once after flushing the log
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate flags, files and the backend's configuration, then (unless --offline) ask the
    cloud's API once with the given credentials (cloudprovider_grpc/commands/checkconfig.py)."""
    from cloudprovider_grpc.commands import checkconfig

    return checkconfig.run(_settings(args), offline=args.offline, autoscaler_flags=args.autoscaler_flags)


def cmd_emulate(args: argparse.Namespace) -> int:
    from cloudprovider_grpc.providers.registry import backend_module

    settings = _settings(args)
    logs.setup(settings.log_level, settings.log_format)
    module = backend_module(args.cloud)
    if not hasattr(module, "build_emulator"):
        raise ConfigError("cloud", f"backend {args.cloud!r} has no API emulator")
    from cloudprovider_grpc.core.stopsignals import StopSignals

    with StopSignals() as stop:  # before announcing: a SIGTERM right after must stop cleanly
        emulator = module.build_emulator(settings.provider_context(), args.address, args.state)
        print(f"{args.cloud} API emulator listening on {emulator.base_url}", flush=True)
        accepts = getattr(module, "EMULATOR_CREDENTIALS", "")
        if accepts:  # the emulator's own demo credentials, never a cloud's: the user needs them to connect
            print(f"{args.cloud} API emulator accepts {accepts}", flush=True)
        stop.wait(None)
    emulator.stop()
    return 0


def cmd_build_front(args: argparse.Namespace) -> int:
    """Build the compiled front from the Go sources shipped in the package into the user cache."""
    from cloudprovider_grpc.front import binary

    try:
        path = binary.build()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"cloudprovider-grpc: build-front: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    import google.protobuf
    import grpc

    versions = f"grpcio {grpc.__version__}, protobuf {google.protobuf.__version__}"
    print(f"cloudprovider-grpc {__version__} ({versions})")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error prints the one useful line first and a short pointer to
    `--help`, not the whole usage of a command with thirty flags before it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists every flag)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cloudprovider-grpc",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog=TOP_LEVEL_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the externalgrpc server", epilog=_server_epilog())
    _add_server_flags(serve)
    serve.set_defaults(func=cmd_serve)
    check = sub.add_parser(
        "check-config", help="validate the configuration and exit", epilog=_server_epilog()
    )
    _add_server_flags(check)
    check.add_argument(
        "--offline",
        action="store_true",
        help="only validate: skip the read-only call to the cloud's API (exit 1 when that call fails)",
    )
    check.add_argument(
        "--autoscaler-flags",
        metavar="FLAGS|FILE",
        help="cluster-autoscaler's command-line flags (a file, or inline after '='): with the price "
        "expander among them, groups without a price are named",
    )
    check.set_defaults(func=cmd_check_config)
    emulate = sub.add_parser("emulate", help="run a cloud's API emulator standalone")
    emulate.add_argument("cloud", help="backend whose API to emulate (e.g. cherry)")
    emulate.add_argument(
        "--address",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="emulator listen address (default 127.0.0.1 on a free port)",
    )
    emulate.add_argument("--state", type=Path, help="persist the emulated cloud's state to this file")
    # the backend configuration the emulator is seeded from (projects, plans, token), as for serve
    emulate.add_argument(
        "--config", type=Path, help="YAML config file (the backend's section seeds the emulator)"
    )
    emulate.add_argument("--cloud-config", type=Path, help="the in-tree provider's cloud-config file")
    emulate.add_argument("--nodes", action="append", metavar="MIN:MAX:NAME", help="node groups (repeatable)")
    emulate.add_argument("--cluster-name", help="cluster name")
    emulate.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default info")
    emulate.add_argument("--log-format", choices=["json", "text"], help="json (default) or text")
    emulate.set_defaults(func=cmd_emulate)
    build_front = sub.add_parser(
        "build-front", help="build the compiled front (needs Go) into the user cache; prints its path"
    )
    build_front.set_defaults(func=cmd_build_front)
    from cloudprovider_grpc.commands import inspect as inspect_cli

    inspect_cli.add_commands(sub)
    version = sub.add_parser("version", help="print versions")
    version.set_defaults(func=cmd_version)
    try:
        from cloudprovider_grpc.simulator import cli as sim_cli
        from cloudprovider_grpc.simulator import cli_args as sim_args
    except ImportError:  # the simulator package is optional at import time
        pass
    else:
        simulate = sub.add_parser("simulate", help="replay a scenario through CA's decision logic")
        sim_args.add_arguments(simulate)
        simulate.set_defaults(func=sim_cli.run_cli)
    return parser


def main(argv: list[str] | None = None) -> int:
    from cloudprovider_grpc.core.secrets import register_environment

    register_environment(os.environ)
    logs.install_hooks()
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # name the command's own usage, not the top-level one, for a flag it does not have
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (commands.choices.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return EXIT_CONFIG
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"cloudprovider-grpc: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
