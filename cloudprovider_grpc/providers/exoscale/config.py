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
The section and the variables are declared by `ExoscaleOptions` (pydantic, on the shared types of
option_models.py: each variable an alias of its key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, ValidationInfo, field_validator

from cloudprovider_grpc.config.secrets import read_secret
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.emulators.exoscale.seed import instance_types
from cloudprovider_grpc.providers.option_models import (
    Count,
    EmulatorRate,
    OptionSection,
    PositiveCount,
    Problem,
    Reserved,
    Seconds,
    TuningOptions,
    checked,
    model_input,
    non_empty_list,
    validated,
)
from cloudprovider_grpc.providers.options import ClientTuning, read_int, read_url
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
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): a new Instance Pool
#: member stays `starting` this long. Users report that CA on Exoscale takes about 5 to 15 minutes to
#: add a node (kubernetes/autoscaler#4796, research notes B); 300 s of boot is the low end of that,
#: before CA's own loop delays. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"boot-seconds": 300.0, "destroy-seconds": 30.0}
_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


#: HTTP client defaults; Exoscale publishes no rate limit (research B5), so ours only smooths bursts
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=10.0)


def _uuid(value: Any) -> str:
    if value is not None and not _UUID_RE.match(str(value)):
        raise Problem(f"{value!r} is not a lower-case UUID")
    return str(value or "")


def _name(value: Any) -> str:
    name = str(value or "").strip()
    if not name:
        raise Problem("missing (a non-empty string)")
    return name


def _labels(value: Any) -> dict[str, str]:
    labels = value or {}
    if not isinstance(labels, Mapping):
        raise Problem("expected a mapping of strings")
    return {str(k): str(v) for k, v in labels.items()}


def _taints(value: Any) -> dict[str, dict[str, str]]:
    taints = value or {}
    if not isinstance(taints, Mapping) or not all(
        isinstance(t, Mapping) and t.get("effect", "NoSchedule") in _TAINT_EFFECTS for t in taints.values()
    ):
        raise Problem("expected {key: {value, effect}} with a Kubernetes taint effect")
    return {
        str(k): {"value": str(t.get("value") or ""), "effect": str(t.get("effect") or "NoSchedule")}
        for k, t in taints.items()
    }


def _type_name(value: Any, at: tuple[str, ...] = ()) -> str:
    known = sorted(f"{t['family']}.{t['size']}" for t in instance_types(EMULATOR_ZONE))
    name = str(value or "").strip()
    if name not in known:
        raise Problem(f"{name!r} is not an emulated instance type (known: {', '.join(known)})", at=at)
    return name


_Uuid = Annotated[str, BeforeValidator(_uuid)]


class NodepoolOptions(OptionSection):
    """A seeded nodepool (`exoscale.emulator.nodepools[i]`): the API's field names (`instance-type`
    by `<family>.<size>`, `taints` as the API's {key: {value, effect}} map), plus fixed ids so a seed
    can name its node groups."""

    UNKNOWN = "key"
    SUGGEST = True
    NULL_IS_EMPTY = True

    id: _Uuid = ""
    instance_pool_id: _Uuid = ""
    name: Annotated[str, BeforeValidator(_name)] = Field("", validate_default=True)
    instance_type: Annotated[str, BeforeValidator(_type_name)] = "standard.medium"
    size: Count = 0
    labels: Annotated[dict[str, str], BeforeValidator(_labels)] = {}
    taints: Annotated[dict[str, dict[str, str]], BeforeValidator(_taints)] = {}

    def entry(self) -> dict[str, Any]:
        """The nodepool in the shape the emulator's `seed_demo` takes."""
        return {
            "id": self.id,
            "instance-pool-id": self.instance_pool_id,
            "name": self.name,
            "type": self.instance_type,
            "size": self.size,
            "labels": dict(self.labels),
            "taints": {k: dict(t) for k, t in self.taints.items()},
        }


def _one_of(*allowed: str) -> BeforeValidator:
    def check(value: Any) -> str:
        if str(value) not in allowed:
            raise Problem(f"{str(value)!r} is not {' or '.join(repr(a) for a in allowed)}")
        return str(value)

    return BeforeValidator(check)


def _auth_status(value: Any) -> int:
    status = int(checked(read_int, value))
    if status not in (401, 403):
        raise Problem(f"must be 401 or 403, got {status}")
    return status


def _demo(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Problem(f"expected true or false, got {value!r}")
    return value


def _stock(value: Any) -> dict[str, int]:
    raw = value or {}
    if not isinstance(raw, Mapping):
        raise Problem("expected a mapping of instance type -> count")
    out = {}
    for k, v in raw.items():
        try:
            out[_type_name(k, (str(k),))] = int(read_int(v, ""))
        except ConfigError as exc:
            raise Problem(exc.problem, at=(str(k),)) from None
    return out


class EmulatorOptions(OptionSection):
    """How `--emulate` seeds the emulated cloud (`exoscale.emulator`; providers/exoscale/wiring.py)."""

    NULL_IS_EMPTY = True

    boot_seconds: Seconds = 5.0
    destroy_seconds: Seconds = 2.0
    operation_polls: Count = 1
    operation_seconds: Seconds = 0.0
    quota_limit: Annotated[int, BeforeValidator(lambda v: int(checked(read_int, v, minimum=-1)))] = 50
    quota_mode: Annotated[str, _one_of("operation", "reject")] = "operation"
    conflict_mode: Annotated[str, _one_of("accept", "reject")] = "accept"
    auth_failure_status: Annotated[int, BeforeValidator(_auth_status)] = 403
    rate_limit: EmulatorRate = None
    #: seed the demo SKS cluster (two nodepools) and standalone pool
    demo: Annotated[bool, BeforeValidator(_demo)] = True
    #: instance type (`<family>.<size>`) -> instances of it the zone can still create (0: none; a
    #: scale-up beyond it fails its operation, reason `unavailable`); types not named have no limit
    stock: Annotated[dict[str, int], BeforeValidator(_stock)] = {}
    #: nodepools seeded instead of the demo's; None: the demo cloud
    nodepools: Annotated[tuple[NodepoolOptions, ...] | None, non_empty_list("nodepools", null=True)] = None

    @field_validator("nodepools")
    @classmethod
    def _unique(cls, pools: tuple[NodepoolOptions, ...] | None) -> tuple[NodepoolOptions, ...] | None:
        for key in ("name", "id", "instance_pool_id"):
            values = [getattr(n, key) for n in pools or () if getattr(n, key)]
            if len(set(values)) != len(values):
                raise Problem(f"two nodepools have the same {key.replace('_', '-')}")
        return pools

    def seed_nodepools(self) -> list[dict[str, Any]] | None:
        """The nodepools in the shape the emulator's `seed_demo` takes; None: the demo's."""
        return None if self.nodepools is None else [n.entry() for n in self.nodepools]


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Sequence[Any] = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise Problem("expected a list of names or ids (or a comma-separated string)")
    names = tuple(dict.fromkeys(str(v).strip() for v in items if str(v).strip()))
    if "*" in names and len(names) > 1:
        raise Problem("'*' (every standalone pool) cannot be combined with names")
    return names


def _text(value: Any) -> str:
    return ("" if value is None else str(value)).strip()


#: each credential's variable, its word in the missing one's error, and its stand-in with --emulate
_CREDENTIALS = {
    "api_key": ("EXOSCALE_API_KEY", "key", EMULATOR_KEY),
    "api_secret": ("EXOSCALE_API_SECRET", "secret", EMULATOR_SECRET),
}


class ExoscaleOptions(TuningOptions):
    """The `exoscale:` section of the YAML config and the in-tree environment variables: each
    variable stands for the key of its name in lower case (and wins over it), plus client tuning,
    allocatable reservations and emulator seeding. The credentials come only from the environment
    (or secret files offered as variables), as in-tree: never from the YAML file, which is not a
    Secret."""

    SUGGEST = True
    NULL_IS_EMPTY = True

    zone: str = Field("", validation_alias=AliasChoices("EXOSCALE_ZONE", "zone"), validate_default=True)
    api_environment: str = Field(
        DEFAULT_ENVIRONMENT, validation_alias=AliasChoices("EXOSCALE_API_ENVIRONMENT", "api-environment")
    )
    #: a full base URL instead of the in-tree host rule ("": `default_endpoint`)
    api_endpoint: str = Field("", validation_alias=AliasChoices("EXOSCALE_API_ENDPOINT", "api-endpoint"))
    sks_cluster: Annotated[str, BeforeValidator(_text)] = Field(
        "", validation_alias=AliasChoices("EXOSCALE_SKS_CLUSTER", "sks-cluster")
    )
    instance_pools: Annotated[tuple[str, ...], BeforeValidator(lambda v: _names(v or []))] = Field(
        (), validation_alias=AliasChoices("EXOSCALE_INSTANCE_POOLS", "instance-pools")
    )
    unbounded_max_size: PositiveCount = DEFAULT_UNBOUNDED_MAX
    reserved: Reserved = {}
    #: how often an operation that failed for `conflict`/`busy` is sent again before it counts as failed
    operation_retries: Count = 5
    emulator: EmulatorOptions = EmulatorOptions()
    api_key: str = Field("", validation_alias="EXOSCALE_API_KEY", repr=False, validate_default=True)
    api_secret: str = Field("", validation_alias="EXOSCALE_API_SECRET", repr=False, validate_default=True)

    @field_validator("zone", mode="before")
    @classmethod
    def _zone(cls, v: Any, info: ValidationInfo) -> str:
        zone = _text(v)
        if not zone:
            if not (info.context or {}).get("emulate"):
                raise Problem("no Exoscale zone specified", key="EXOSCALE_ZONE")
            return EMULATOR_ZONE
        if not _ZONE_RE.match(zone):
            raise Problem(f"{zone!r} is not a zone name (e.g. ch-gva-2)")
        return zone

    @field_validator("api_key", "api_secret", mode="before")
    @classmethod
    def _credential(cls, v: Any, info: ValidationInfo) -> str:
        """read_secret strips, checks header-safety and registers the value for redaction everywhere;
        no message quotes it."""
        name, what, emulated = _CREDENTIALS[str(info.field_name)]
        try:
            value = read_secret({name: v}, name)
            if not value:
                if not (info.context or {}).get("emulate"):
                    raise ConfigError(name, f"no Exoscale API {what} specified")
                value = emulated
            return credential(value, name)
        except ConfigError as exc:
            raise Problem(exc.problem, key=name) from None

    @field_validator("api_environment", mode="before")
    @classmethod
    def _environment(cls, v: Any) -> str:
        environment = _text(v) or DEFAULT_ENVIRONMENT
        if not _ENV_RE.match(environment):
            raise Problem(f"{environment!r} is not a host label (default 'api')")
        return environment

    @field_validator("api_endpoint", mode="before")
    @classmethod
    def _endpoint(cls, v: Any) -> str:
        return str(checked(read_url, _text(v))) if _text(v) else ""


#: the order the inputs were always checked in, each phase's problems told together: the YAML
#: section's own keys, then the zone and the credentials (a first run learns every missing input at
#: once), the API environment, the endpoint, and the standalone pools named in the environment
_SECTION_FIELDS = frozenset(
    {*TuningOptions.model_fields, "unbounded_max_size", "reserved", "operation_retries", "emulator"}
)
_PHASES = ({"zone", "api_key", "api_secret"}, {"api_environment"}, {"api_endpoint"}, {"instance_pools"})


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


def load_config(ctx: ProviderContext) -> ExoscaleConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem."""
    if ctx.cloud_config is not None:
        raise ConfigError(
            "cloud-config", "the Exoscale provider has no cloud-config file (in-tree neither); use env vars"
        )
    given = model_input(ExoscaleOptions, ctx.options, ctx.env)
    # pools named in the YAML are the section's own key; named in the environment, checked last
    pools_phase = set() if "EXOSCALE_INSTANCE_POOLS" in given else {"instance_pools"}
    opts = validated(
        ExoscaleOptions,
        given,
        "exoscale",
        context={"emulate": ctx.emulate},
        section=_SECTION_FIELDS | pools_phase,
        phases=_PHASES,
    )

    pools = opts.instance_pools
    if ctx.emulate and not pools and not ctx.nodes:
        pools = ("*",)  # the demo cloud's standalone pool joins the demo nodepools

    seen: set[str] = set()
    for spec in ctx.nodes:
        if spec.name in seen:
            raise ConfigError(f"nodes ({spec.name})", "named twice")
        seen.add(spec.name)

    return ExoscaleConfig(
        zone=opts.zone,
        api_key=opts.api_key,
        api_secret=opts.api_secret,
        endpoint=opts.api_endpoint or default_endpoint(opts.api_environment, opts.zone),
        sks_cluster=opts.sks_cluster,
        instance_pools=pools,
        specs=tuple(ctx.nodes),
        unbounded_max_size=opts.unbounded_max_size,
        reserved=opts.reserved,
        tuning=opts.tuning(TUNING),
        operation_retries=opts.operation_retries,
        emulator=opts.emulator,
    )
