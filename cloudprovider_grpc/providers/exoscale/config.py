"""Exoscale configuration: the in-tree provider's inputs, accepted verbatim, plus our few new keys.

In-tree facts (kubernetes/autoscaler cluster-autoscaler/cloudprovider/exoscale/exoscale_manager.go,
README, examples/generate-secret.sh): there is no cloud-config file; the environment carries
`EXOSCALE_ZONE`, `EXOSCALE_API_KEY`, `EXOSCALE_API_SECRET` (all three required) and
`EXOSCALE_API_ENVIRONMENT` (default `api`, the API host being `<environment>-<zone>.exoscale.com`);
the example Secret `exoscale-api-credentials` maps its keys `api-key`/`api-secret`/`api-zone` onto
them; `--nodes=MIN:MAX:NAME` names an SKS nodepool or a standalone Instance Pool; without a spec a
group gets min 1 and max = the organisation's `instance` quota limit.

New here (documented as new in the README): `EXOSCALE_API_ENDPOINT` (a full base URL, for the
emulator), `EXOSCALE_SKS_CLUSTER` (the SKS cluster, id or name, whose nodepools are discovered) and
`EXOSCALE_INSTANCE_POOLS` (standalone Instance Pools to manage: names or ids, comma-separated, `*` for
every pool no nodepool manages), and the `exoscale:` section of the YAML config with the same keys in
lower case plus client tuning, allocatable reservations and emulator seeding. Environment wins over
YAML. Every problem is one `ConfigError(key, problem)` at startup; no network I/O happens here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from cloudprovider_grpc.errors import ConfigError
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext

#: in-tree default of EXOSCALE_API_ENVIRONMENT (exoscale_manager.go)
DEFAULT_ENVIRONMENT = "api"
#: used only with --emulate when the environment names no zone/key/secret (a demo cloud)
EMULATOR_ZONE = "ch-gva-2"
EMULATOR_KEY = "EXOemulatorkey0000000000"
EMULATOR_SECRET = "exoscale-emulator-secret"
#: the max size of a group without a --nodes spec when the `instance` quota is unlimited (-1) or
#: could not be read: in-tree took the quota limit verbatim, so -1 became max -1 (every scale-up
#: refused). CA's --max-nodes-total still bounds the cluster as a whole.
DEFAULT_UNBOUNDED_MAX = 1000
#: a zone is a DNS label (the OpenAPI enum today: at-vie-1, ch-gva-2, de-fra-1, ...); new zones
#: appear over time, so the form is checked, not the list
_ZONE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_ENV_RE = _ZONE_RE
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
_TOP_KEYS = frozenset(
    {
        "zone",
        "api-environment",
        "api-endpoint",
        "sks-cluster",
        "instance-pools",
        "unbounded-max-size",
        "reserved",
        "connect-timeout",
        "read-timeout",
        "retries",
        "retry-budget",
        "rate-limit",
        "catalog-ttl",
        "operation-retries",
        "emulator",
    }
)
_EMULATOR_KEYS = frozenset(
    {
        "boot-seconds",
        "destroy-seconds",
        "operation-polls",
        "operation-seconds",
        "quota-limit",
        "quota-mode",
        "conflict-mode",
        "auth-failure-status",
        "rate-limit",
        "demo",
    }
)


@dataclass(frozen=True)
class EmulatorOptions:
    """How `--emulate` seeds the emulated cloud (providers/exoscale/emulator.py)."""

    boot_seconds: float = 5.0
    destroy_seconds: float = 2.0
    operation_polls: int = 1
    operation_seconds: float = 0.0
    quota_limit: int = 50
    quota_mode: str = "operation"
    conflict_mode: str = "accept"
    auth_failure_status: int = 403
    rate_limit: float | None = None
    #: seed the demo SKS cluster (two nodepools) and standalone pool
    demo: bool = True


@dataclass(frozen=True)
class ExoscaleConfig:
    zone: str
    api_key: str = field(repr=False)
    api_secret: str = field(repr=False)
    endpoint: str
    #: SKS cluster id or name; "" = the zone's only cluster, if it has exactly one
    sks_cluster: str = ""
    #: standalone pool names/ids to manage; ("*",) = every pool no nodepool manages
    instance_pools: tuple[str, ...] = ()
    specs: tuple[NodesSpec, ...] = ()
    unbounded_max_size: int = DEFAULT_UNBOUNDED_MAX
    reserved: Mapping[str, str] = field(default_factory=dict)
    connect_timeout: float = 3.05
    read_timeout: float = 10.0
    retries: int = 4
    #: seconds one API call may spend retrying: Refresh lists synchronously under CA's deadline
    retry_budget: float = 8.0
    #: requests per second from this client; Exoscale publishes no limit (research B5), so this only
    #: smooths bursts
    rate_limit: float = 10.0
    catalog_ttl: float = 3600.0
    #: how often an operation that failed for `conflict`/`busy` is sent again before it counts as failed
    operation_retries: int = 5
    emulator: EmulatorOptions = field(default_factory=EmulatorOptions)

    @property
    def spec_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)


def default_endpoint(environment: str, zone: str) -> str:
    """The in-tree host rule: `<environment>-<zone>.exoscale.com`, API v2 under `/v2/`."""
    return f"https://{environment}-{zone}.exoscale.com/v2/"


def credential(value: str, key: str) -> str:
    """A key or secret as it goes into a header: surrounding whitespace (a Secret file's trailing
    newline) stripped, and nothing that could split or corrupt the Authorization header."""
    value = value.strip()
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in value) or "," in value:
        raise ConfigError(key, "contains whitespace, a comma or a non-printable character")
    return value


def _norm(key: object) -> str:
    return str(key).strip().lower().replace("_", "-")


def _float(value: Any, where: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool):
        raise ConfigError(where, f"{value!r} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(where, f"{value!r} is not a number") from None
    if f < 0 or (not allow_zero and f == 0):
        raise ConfigError(where, f"must be {'above' if not allow_zero else 'at least'} 0, got {f:g}")
    return f


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(where, f"expected an integer, got {value!r}")
    try:
        n = int(str(value).strip(), 10)
    except ValueError:
        raise ConfigError(where, f"{value!r} is not an integer") from None
    if n < minimum:
        raise ConfigError(where, f"must be at least {minimum}, got {n}")
    return n


def _endpoint(value: str, where: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where, f"{value!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise ConfigError(where, "must not carry a query or fragment")
    return value if value.endswith("/") else value + "/"


def _names(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Sequence[Any] = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise ConfigError(where, "expected a list of names or ids (or a comma-separated string)")
    names = tuple(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))
    if "*" in names and len(names) > 1:
        raise ConfigError(where, "'*' (every standalone pool) cannot be combined with names")
    return names


def _pick(env: Mapping[str, str], var: str, opts: Mapping[str, Any], key: str) -> tuple[str, str]:
    """(value, where it came from): the environment variable wins over the YAML key."""
    if env.get(var, "").strip():
        return env[var], var
    value = opts.get(key)
    return ("" if value is None else str(value)), f"exoscale.{key}"


def _emulator_options(value: Any) -> EmulatorOptions:
    if value is None:
        return EmulatorOptions()
    if not isinstance(value, Mapping):
        raise ConfigError("exoscale.emulator", "expected a mapping")
    emu = {_norm(k): v for k, v in value.items()}
    for k in emu:
        if k not in _EMULATOR_KEYS:
            raise ConfigError(
                f"exoscale.emulator.{k}", f"unknown option (known: {', '.join(sorted(_EMULATOR_KEYS))})"
            )
    d = EmulatorOptions()

    def w(k: str) -> str:
        return f"exoscale.emulator.{k}"

    quota_mode = str(emu.get("quota-mode", d.quota_mode))
    if quota_mode not in ("operation", "reject"):
        raise ConfigError(w("quota-mode"), f"{quota_mode!r} is not 'operation' or 'reject'")
    conflict_mode = str(emu.get("conflict-mode", d.conflict_mode))
    if conflict_mode not in ("accept", "reject"):
        raise ConfigError(w("conflict-mode"), f"{conflict_mode!r} is not 'accept' or 'reject'")
    status = _int(emu.get("auth-failure-status", d.auth_failure_status), w("auth-failure-status"), minimum=0)
    if status not in (401, 403):
        raise ConfigError(w("auth-failure-status"), f"must be 401 or 403, got {status}")
    demo = emu.get("demo", d.demo)
    if not isinstance(demo, bool):
        raise ConfigError(w("demo"), f"expected true or false, got {demo!r}")
    return EmulatorOptions(
        boot_seconds=_float(emu.get("boot-seconds", d.boot_seconds), w("boot-seconds")),
        destroy_seconds=_float(emu.get("destroy-seconds", d.destroy_seconds), w("destroy-seconds")),
        operation_polls=_int(emu.get("operation-polls", d.operation_polls), w("operation-polls"), minimum=0),
        operation_seconds=_float(emu.get("operation-seconds", d.operation_seconds), w("operation-seconds")),
        quota_limit=_int(emu.get("quota-limit", d.quota_limit), w("quota-limit"), minimum=-1),
        quota_mode=quota_mode,
        conflict_mode=conflict_mode,
        auth_failure_status=status,
        rate_limit=(
            _float(emu["rate-limit"], w("rate-limit"), allow_zero=False) if emu.get("rate-limit") else None
        ),
        demo=demo,
    )


def load_config(ctx: ProviderContext) -> ExoscaleConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem."""
    if ctx.cloud_config is not None:
        raise ConfigError(
            "cloud-config", "the Exoscale provider has no cloud-config file (in-tree neither); use env vars"
        )
    opts = {_norm(k): v for k, v in dict(ctx.options or {}).items()}
    for key in opts:
        if key not in _TOP_KEYS:
            raise ConfigError(f"exoscale.{key}", f"unknown option (known: {', '.join(sorted(_TOP_KEYS))})")
    env = ctx.env

    zone, zone_where = _pick(env, "EXOSCALE_ZONE", opts, "zone")
    zone = zone.strip()
    if not zone:
        if not ctx.emulate:
            raise ConfigError("EXOSCALE_ZONE", "no Exoscale zone specified")
        zone = EMULATOR_ZONE
    if not _ZONE_RE.match(zone):
        raise ConfigError(zone_where, f"{zone!r} is not a zone name (e.g. ch-gva-2)")

    # credentials come only from the environment (or secret files offered as env), as in-tree:
    # never from the YAML file, which is not a Secret
    key, secret = env.get("EXOSCALE_API_KEY", ""), env.get("EXOSCALE_API_SECRET", "")
    key_where, secret_where = "EXOSCALE_API_KEY", "EXOSCALE_API_SECRET"
    if not key.strip():
        if not ctx.emulate:
            raise ConfigError(key_where, "no Exoscale API key specified")
        key = EMULATOR_KEY
    if not secret.strip():
        if not ctx.emulate:
            raise ConfigError(secret_where, "no Exoscale API secret specified")
        secret = EMULATOR_SECRET
    key = credential(key, key_where)
    secret = credential(secret, secret_where)

    environment, env_where = _pick(env, "EXOSCALE_API_ENVIRONMENT", opts, "api-environment")
    environment = environment.strip() or DEFAULT_ENVIRONMENT
    if not _ENV_RE.match(environment):
        raise ConfigError(env_where, f"{environment!r} is not a host label (default 'api')")
    endpoint, endpoint_where = _pick(env, "EXOSCALE_API_ENDPOINT", opts, "api-endpoint")
    endpoint = (
        _endpoint(endpoint.strip(), endpoint_where)
        if endpoint.strip()
        else default_endpoint(environment, zone)
    )

    cluster, _ = _pick(env, "EXOSCALE_SKS_CLUSTER", opts, "sks-cluster")
    if env.get("EXOSCALE_INSTANCE_POOLS", "").strip():
        pools = _names(env["EXOSCALE_INSTANCE_POOLS"], "EXOSCALE_INSTANCE_POOLS")
    else:
        pools = _names(opts.get("instance-pools") or [], "exoscale.instance-pools")
    if ctx.emulate and not pools and not ctx.nodes:
        pools = ("*",)  # the demo cloud's standalone pool joins the demo nodepools

    seen: set[str] = set()
    for spec in ctx.nodes:
        if spec.name in seen:
            raise ConfigError(f"nodes ({spec.name})", "named twice")
        seen.add(spec.name)

    reserved: dict[str, str] = {}
    res_opt = opts.get("reserved") or {}
    if not isinstance(res_opt, Mapping):
        raise ConfigError("exoscale.reserved", "expected a mapping of resource name to quantity")
    for k, v in res_opt.items():
        if not _QUANTITY_RE.match(str(v)):
            raise ConfigError(f"exoscale.reserved.{k}", f"{v!r} is not a Kubernetes quantity")
        reserved[str(k)] = str(v)

    return ExoscaleConfig(
        zone=zone,
        api_key=key,
        api_secret=secret,
        endpoint=endpoint,
        sks_cluster=cluster.strip(),
        instance_pools=pools,
        specs=tuple(ctx.nodes),
        unbounded_max_size=_int(
            opts.get("unbounded-max-size", DEFAULT_UNBOUNDED_MAX), "exoscale.unbounded-max-size", minimum=1
        ),
        reserved=reserved,
        connect_timeout=_float(
            opts.get("connect-timeout", 3.05), "exoscale.connect-timeout", allow_zero=False
        ),
        read_timeout=_float(opts.get("read-timeout", 10.0), "exoscale.read-timeout", allow_zero=False),
        retries=_int(opts.get("retries", 4), "exoscale.retries", minimum=0),
        retry_budget=_float(opts.get("retry-budget", 8.0), "exoscale.retry-budget", allow_zero=False),
        rate_limit=_float(opts.get("rate-limit", 10.0), "exoscale.rate-limit", allow_zero=False),
        catalog_ttl=_float(opts.get("catalog-ttl", 3600.0), "exoscale.catalog-ttl"),
        operation_retries=_int(opts.get("operation-retries", 5), "exoscale.operation-retries", minimum=0),
        emulator=_emulator_options(opts.get("emulator")),
    )
