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

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.core.secrets import read_secret
from cloudprovider_grpc.providers.exoscale.emulator_options import (
    EMULATOR_ZONE,
    EmulatorOptions,
)
from cloudprovider_grpc.providers.option_models import (
    Count,
    PositiveCount,
    Problem,
    Reserved,
    TuningOptions,
    checked,
    model_input,
    validated,
)
from cloudprovider_grpc.providers.options import ClientTuning, read_url
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext

#: in-tree default of EXOSCALE_API_ENVIRONMENT (exoscale_manager.go)
DEFAULT_ENVIRONMENT = "api"
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
#: add a node (kubernetes/autoscaler#4796); 300 s of boot is the low end of that,
#: before CA's own loop delays. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"boot-seconds": 300.0, "destroy-seconds": 30.0}


#: HTTP client defaults; Exoscale publishes no rate limit, so ours only smooths bursts
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=10.0)


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
