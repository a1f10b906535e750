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

from cloudprovider_grpc.config.secrets import read_secret
from cloudprovider_grpc.core.errors import ConfigError, raise_all, unknown_key
from cloudprovider_grpc.emulators.exoscale.seed import instance_types
from cloudprovider_grpc.providers.options import (
    ClientTuning,
    norm_key,
    read_float,
    read_int,
    read_reserved,
    read_url,
)
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
_TOP_KEYS = frozenset(
    {
        "zone",
        "api-environment",
        "api-endpoint",
        "sks-cluster",
        "instance-pools",
        "unbounded-max-size",
        "reserved",
        *ClientTuning.KEYS,
        "operation-retries",
        "emulator",
    }
)
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): a new Instance Pool
#: member stays `starting` this long. Users report that CA on Exoscale takes about 5 to 15 minutes to
#: add a node (kubernetes/autoscaler#4796, research notes B); 300 s of boot is the low end of that,
#: before CA's own loop delays. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"boot-seconds": 300.0, "destroy-seconds": 30.0}
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
        "stock",
        "nodepools",
    }
)
#: a seeded nodepool: the API's field names (`instance-type` by `<family>.<size>`, `taints` as the API's
#: {key: {value, effect}} map), plus fixed ids so a seed can name its node groups
_NODEPOOL_KEYS = frozenset({"id", "instance-pool-id", "name", "instance-type", "size", "labels", "taints"})
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


#: HTTP client defaults; Exoscale publishes no rate limit (research B5), so ours only smooths bursts
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=10.0)


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
    #: instance type (`<family>.<size>`) -> instances of it the zone can still create (0: none; a
    #: scale-up beyond it fails its operation, reason `unavailable`); types not named have no limit
    stock: Mapping[str, int] = field(default_factory=dict)
    #: nodepools seeded instead of the demo's (`seed_demo`'s entry shape); None: the demo cloud
    nodepools: tuple[Mapping[str, Any], ...] | None = None


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
    tuning: ClientTuning = field(default_factory=lambda: TUNING)
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
    """A key or secret as it goes into the Authorization header's pragmas: surrounding whitespace
    (a Secret file's trailing newline) stripped, and no space or comma, which would split a pragma."""
    value = value.strip()
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in value) or "," in value:
        raise ConfigError(key, "contains whitespace, a comma or a non-printable character")
    return value


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


def _type_name(value: Any, where: str) -> str:
    known = sorted(f"{t['family']}.{t['size']}" for t in instance_types(EMULATOR_ZONE))
    name = str(value or "").strip()
    if name not in known:
        raise ConfigError(where, f"{name!r} is not an emulated instance type (known: {', '.join(known)})")
    return name


def _seed_nodepool(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, "expected a mapping")
    opts = {norm_key(k): v for k, v in raw.items()}
    for k in opts:
        if k not in _NODEPOOL_KEYS:
            raise unknown_key(f"{where}.{k}", k, _NODEPOOL_KEYS)
    name = str(opts.get("name") or "").strip()
    if not name:
        raise ConfigError(f"{where}.name", "missing (a non-empty string)")
    for key in ("id", "instance-pool-id"):
        if opts.get(key) is not None and not _UUID_RE.match(str(opts[key])):
            raise ConfigError(f"{where}.{key}", f"{opts[key]!r} is not a lower-case UUID")
    labels = opts.get("labels") or {}
    taints = opts.get("taints") or {}
    if not isinstance(labels, Mapping):
        raise ConfigError(f"{where}.labels", "expected a mapping of strings")
    if not isinstance(taints, Mapping) or not all(
        isinstance(t, Mapping) and t.get("effect", "NoSchedule") in _TAINT_EFFECTS for t in taints.values()
    ):
        raise ConfigError(f"{where}.taints", "expected {key: {value, effect}} with a Kubernetes taint effect")
    return {
        "id": str(opts.get("id") or ""),
        "instance-pool-id": str(opts.get("instance-pool-id") or ""),
        "name": name,
        "type": _type_name(opts.get("instance-type", "standard.medium"), f"{where}.instance-type"),
        "size": read_int(opts.get("size", 0), f"{where}.size"),
        "labels": {str(k): str(v) for k, v in labels.items()},
        "taints": {
            str(k): {"value": str(t.get("value") or ""), "effect": str(t.get("effect") or "NoSchedule")}
            for k, t in taints.items()
        },
    }


def _emulator_options(value: Any) -> EmulatorOptions:
    if value is None:
        return EmulatorOptions()
    if not isinstance(value, Mapping):
        raise ConfigError("exoscale.emulator", "expected a mapping")
    emu = {norm_key(k): v for k, v in value.items()}
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
    status = read_int(
        emu.get("auth-failure-status", d.auth_failure_status), w("auth-failure-status"), minimum=0
    )
    if status not in (401, 403):
        raise ConfigError(w("auth-failure-status"), f"must be 401 or 403, got {status}")
    demo = emu.get("demo", d.demo)
    if not isinstance(demo, bool):
        raise ConfigError(w("demo"), f"expected true or false, got {demo!r}")
    raw_stock = emu.get("stock") or {}
    if not isinstance(raw_stock, Mapping):
        raise ConfigError(w("stock"), "expected a mapping of instance type -> count")
    stock = {_type_name(k, w(f"stock.{k}")): read_int(v, w(f"stock.{k}")) for k, v in raw_stock.items()}
    nodepools = None
    if emu.get("nodepools") is not None:
        if not isinstance(emu["nodepools"], list) or not emu["nodepools"]:
            raise ConfigError(w("nodepools"), "expected a non-empty list of nodepools")
        nodepools = tuple(_seed_nodepool(n, w(f"nodepools[{i}]")) for i, n in enumerate(emu["nodepools"]))
        for key in ("name", "id", "instance-pool-id"):
            values = [n[key] for n in nodepools if n[key]]
            if len(set(values)) != len(values):
                raise ConfigError(w("nodepools"), f"two nodepools have the same {key}")
    return EmulatorOptions(
        boot_seconds=read_float(emu.get("boot-seconds", d.boot_seconds), w("boot-seconds")),
        destroy_seconds=read_float(emu.get("destroy-seconds", d.destroy_seconds), w("destroy-seconds")),
        operation_polls=read_int(
            emu.get("operation-polls", d.operation_polls), w("operation-polls"), minimum=0
        ),
        operation_seconds=read_float(
            emu.get("operation-seconds", d.operation_seconds), w("operation-seconds")
        ),
        quota_limit=read_int(emu.get("quota-limit", d.quota_limit), w("quota-limit"), minimum=-1),
        quota_mode=quota_mode,
        conflict_mode=conflict_mode,
        auth_failure_status=status,
        rate_limit=(
            read_float(emu["rate-limit"], w("rate-limit"), allow_zero=False)
            if emu.get("rate-limit")
            else None
        ),
        demo=demo,
        stock=stock,
        nodepools=nodepools,
    )


def load_config(ctx: ProviderContext) -> ExoscaleConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem."""
    if ctx.cloud_config is not None:
        raise ConfigError(
            "cloud-config", "the Exoscale provider has no cloud-config file (in-tree neither); use env vars"
        )
    opts = {norm_key(k): v for k, v in dict(ctx.options or {}).items()}
    for key in opts:
        if key not in _TOP_KEYS:
            raise unknown_key(f"exoscale.{key}", key, _TOP_KEYS, what="option")
    env = ctx.env

    # the zone and both credentials are checked before any is reported: a first run learns every
    # missing input at once
    problems: list[ConfigError] = []
    zone, zone_where = _pick(env, "EXOSCALE_ZONE", opts, "zone")
    zone = zone.strip()
    if not zone:
        if not ctx.emulate:
            problems.append(ConfigError("EXOSCALE_ZONE", "no Exoscale zone specified"))
        zone = EMULATOR_ZONE
    elif not _ZONE_RE.match(zone):
        problems.append(ConfigError(zone_where, f"{zone!r} is not a zone name (e.g. ch-gva-2)"))

    # credentials come only from the environment (or secret files offered as env), as in-tree:
    # never from the YAML file, which is not a Secret
    # read_secret strips, checks header-safety and registers both for redaction everywhere
    key_where, secret_where = "EXOSCALE_API_KEY", "EXOSCALE_API_SECRET"
    creds: dict[str, str] = {}
    for where, what, fallback in (
        (key_where, "key", EMULATOR_KEY),
        (secret_where, "secret", EMULATOR_SECRET),
    ):
        try:
            value = read_secret(env, where)
            if not value.strip():
                if not ctx.emulate:
                    raise ConfigError(where, f"no Exoscale API {what} specified")
                value = fallback
            creds[where] = credential(value, where)
        except ConfigError as exc:
            problems.append(exc)
    raise_all(problems)
    key, secret = creds[key_where], creds[secret_where]

    environment, env_where = _pick(env, "EXOSCALE_API_ENVIRONMENT", opts, "api-environment")
    environment = environment.strip() or DEFAULT_ENVIRONMENT
    if not _ENV_RE.match(environment):
        raise ConfigError(env_where, f"{environment!r} is not a host label (default 'api')")
    endpoint, endpoint_where = _pick(env, "EXOSCALE_API_ENDPOINT", opts, "api-endpoint")
    endpoint = (
        read_url(endpoint.strip(), endpoint_where)
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

    reserved = read_reserved(opts.get("reserved"), "exoscale.reserved")

    return ExoscaleConfig(
        zone=zone,
        api_key=key,
        api_secret=secret,
        endpoint=endpoint,
        sks_cluster=cluster.strip(),
        instance_pools=pools,
        specs=tuple(ctx.nodes),
        unbounded_max_size=read_int(
            opts.get("unbounded-max-size", DEFAULT_UNBOUNDED_MAX), "exoscale.unbounded-max-size", minimum=1
        ),
        reserved=reserved,
        tuning=TUNING.read(opts, "exoscale"),
        operation_retries=read_int(opts.get("operation-retries", 5), "exoscale.operation-retries", minimum=0),
        emulator=_emulator_options(opts.get("emulator")),
    )
