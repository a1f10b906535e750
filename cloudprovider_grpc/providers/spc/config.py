"""StackPointCloud configuration: the fork's inputs, read verbatim, plus our documented options.

In-tree (fork) facts (StackPointCloud/autoscaler at tag `stackpointio-1.1.0.c`,
`cluster-autoscaler/cloudprovider/spc/spc_manager.go` and
`deploy-spc/cluster-autoscaler-deployment.yml.j2`):

- environment, all required: `CLUSTER_API_TOKEN`, `SPC_API_BASE_URL` (a code comment calls it
  `SPC_BASE_API_URL`; we accept both and prefer the former), `ORGANIZATION_ID` and `CLUSTER_ID`
  (integers). The deployment fills them from the Secret `stackpointio`, keys `api-token`,
  `api-url`, `organization-id`, `cluster-id`;
- the base URL has no version prefix (`https://api.stackpoint.io`); paths are appended to it;
- node groups are discovered from the cluster's node pools with `autoscaled: true`; the optional
  ConfigMap `stackpoint-node-pools` (key `nodepools`, a JSON array of node-pool objects) replaces
  the pool listing. We read it as a file mounted from that ConfigMap, named by `SPC_NODE_POOLS_FILE`
  or `spc.node-pools-file` (new);
- gen 1 (`spc-autoscaler-0.4.x`) took `--nodes=<min>:<max>:<instance size>[:<id>]`, group id
  `autoscaling-<id>` (`default` when omitted). Accepted too. A `--nodes MIN:MAX:NAME` whose NAME is
  not an instance size narrows the discovered groups instead (by group id, pool instance_id or
  pool name), as for every backend.

The options are declared here as pydantic models: every key of the `spc:` section and every
environment variable of the fork read in a key's place (its first alias, so it wins), with type,
range and default (`SpcOptions`, `EmulatorOptions`, `EmulatorPool`). `load_config` gathers the
inputs into their input, reads the pools file and `--nodes` (group_sources.py), and resolves what
the driver reads (`SpcConfig`). Every problem is reported at build time as `ConfigError(key,
problem)`; nothing here does I/O beyond reading the configured files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator

from cloudprovider_grpc.core.errors import raise_all
from cloudprovider_grpc.formats.gotemplate import GoTemplate, TemplateError
from cloudprovider_grpc.providers.option_models import (
    OR_DEFAULTS,
    Problem,
    Reserved,
    Timeout,
    TuningOptions,
    told_in_order,
    where_in,
)
from cloudprovider_grpc.providers.options import ClientTuning, norm_key
from cloudprovider_grpc.providers.registry import ProviderContext
from cloudprovider_grpc.providers.spc.emulator_options import EmulatorOptions
from cloudprovider_grpc.providers.spc.group_sources import Gen1Group, read_nodes, read_pools_file
from cloudprovider_grpc.providers.spc.providerid import parse_template

#: with --emulate and no CLUSTER_API_TOKEN, the emulator accepts this one
EMULATOR_DEFAULT_TOKEN = "spc-emulator-token"
#: the emulated demo cluster's ids when ORGANIZATION_ID / CLUSTER_ID are not given
EMULATOR_DEFAULT_ORG = 1
EMULATOR_DEFAULT_CLUSTER = 1
#: RFC 9110 field-value characters: visible ASCII and spaces inside, no CR/LF/controls
_HEADER_SAFE_RE = re.compile(r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$")


#: the environment variable and the fork's Secret key of each required input
_REQUIRED_INPUTS = {
    "token": ("CLUSTER_API_TOKEN", "api-token"),
    "api_url": ("SPC_API_BASE_URL", "api-url"),
    "organization_id": ("ORGANIZATION_ID", "organization-id"),
    "cluster_id": ("CLUSTER_ID", "cluster-id"),
}
#: what --emulate uses for a required input left out
_EMULATED = {
    "token": EMULATOR_DEFAULT_TOKEN,
    "organization_id": EMULATOR_DEFAULT_ORG,
    "cluster_id": EMULATOR_DEFAULT_CLUSTER,
}


def _missing(info: ValidationInfo) -> Any:
    """A required input's stand-in with --emulate (None: the emulator's own address), else its error."""
    name = str(info.field_name)
    if (info.context or {}).get("emulate"):
        return _EMULATED.get(name)
    env, secret_key = _REQUIRED_INPUTS[name]
    raise Problem(f"is required and missing (Secret stackpointio, key {secret_key})", key=env)


def _api_url(v: Any) -> str:
    value = str(v).strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem(f"{value!r} is not an http(s) URL")
    # the fork trims a trailing "/" and appends "/orgs/..."; we keep the path as a directory
    return value.rstrip("/") + "/"


def _positive_int(v: Any) -> int:
    text = str(v)
    if not text.strip().isdigit() or int(text) <= 0:
        raise Problem(f"{text!r} is not a positive integer")
    return int(text)


class SpcOptions(TuningOptions):
    """The `spc:` section and the fork's environment. The four inputs the fork requires are checked
    together (`REQUIRED`): a first run learns every missing one at once, not one per attempt."""

    REQUIRED: ClassVar[frozenset[str]] = frozenset({"token", "api_url", "organization_id", "cluster_id"})

    token: str = Field("", validation_alias="CLUSTER_API_TOKEN", repr=False, validate_default=True)
    api_url: str | None = Field(
        None,
        validation_alias=AliasChoices("SPC_API_BASE_URL", "SPC_BASE_API_URL", "api-url"),
        validate_default=True,
    )
    organization_id: int | None = Field(
        None, validation_alias=AliasChoices("ORGANIZATION_ID", "organization-id"), validate_default=True
    )
    cluster_id: int | None = Field(
        None, validation_alias=AliasChoices("CLUSTER_ID", "cluster-id"), validate_default=True
    )
    #: a file mounted from the ConfigMap `stackpoint-node-pools`, replacing the pool listing (read
    #: with --nodes by `_group_sources`, in the order problems were always told)
    node_pools_file: str | None = Field(
        None, validation_alias=AliasChoices("SPC_NODE_POOLS_FILE", "node-pools-file")
    )
    provider_id_template: GoTemplate | None = None
    reserved: Reserved = Field(default_factory=dict)
    emulator: Annotated[EmulatorOptions, OR_DEFAULTS] = Field(default_factory=EmulatorOptions)
    #: seconds a node may stay `draft` before it counts as failed
    draft_timeout: Timeout = 600.0

    SUGGEST = True

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, v: Any, info: ValidationInfo) -> str:
        """Stripped (a mounted Secret often ends with a newline) and header-safe; the message never
        quotes the value."""
        value = str(v).strip()
        if value and not _HEADER_SAFE_RE.match(value):
            raise Problem("contains characters that cannot be sent in an HTTP header")
        return value or str(_missing(info))

    @field_validator("api_url", mode="before")
    @classmethod
    def _url(cls, v: Any, info: ValidationInfo) -> str | None:
        return _api_url(v) if v else _missing(info)

    @field_validator("organization_id", "cluster_id", mode="before")
    @classmethod
    def _id(cls, v: Any, info: ValidationInfo) -> int:
        return _positive_int(v) if v is not None else int(_missing(info))

    @field_validator("node_pools_file", mode="before")
    @classmethod
    def _path(cls, v: Any) -> str | None:
        return str(v) if v else None

    @field_validator("provider_id_template", mode="before")
    @classmethod
    def _template(cls, v: Any) -> GoTemplate | None:
        if not v:
            return None
        try:
            return parse_template(str(v))
        except TemplateError as exc:
            raise Problem(str(exc)) from None


#: the public API of the SPC era (stackpoint-api-docs `_basics.md`)
DEFAULT_API_URL = "https://api.stackpoint.io/"

#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): `draft` ->
#: `building` -> `provisioned` -> `running`. SPC documents no per-state times; the first fork's logs
#: show a one-node scale-up at 21:03 and the group full at 21:18 (StackPointCloud/contrib
#: `cluster-autoscaler/cloudprovider/spc/` at spc-autoscaler-0.4.3), so a node takes
#: minutes; 60 + 420 + 120 s (10 minutes) is this project's reading of it, under CA's 15-minute
#: max-node-provision-time. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {
    "draft-seconds": 60.0,
    "building-seconds": 420.0,
    "provisioned-seconds": 120.0,
    "deleting-seconds": 60.0,
}
#: HTTP client defaults; SPC documented no rate limit, so ours only keeps a burst of deletes polite.
#: The catalogue (machine table, pool templates) is rebuilt from the pool listing every 5 minutes.
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=10.0, catalog_ttl=300.0)


@dataclass(frozen=True)
class SpcConfig:
    api_url: str
    token: str = field(repr=False)
    org_id: int
    cluster_id: int
    #: pools from `node-pools-file` (replaces GET nodepools), or None to list them
    pools_override: tuple[Mapping[str, Any], ...] | None = None
    gen1: tuple[Gen1Group, ...] = ()
    #: `--nodes MIN:MAX:NAME` narrowing discovered groups
    narrow: tuple[tuple[int, int, str], ...] = ()
    draft_timeout: float = 600.0
    provider_id_template: GoTemplate | None = None
    reserved: Mapping[str, str] = field(default_factory=dict)
    tuning: ClientTuning = field(default_factory=lambda: TUNING)
    emulator: EmulatorOptions = field(default_factory=EmulatorOptions)

    @property
    def path(self) -> str:
        return f"orgs/{self.org_id}/clusters/{self.cluster_id}"


def options_input(ctx: ProviderContext) -> dict[str, Any]:
    """The model's input: the `spc:` section's keys, and the fork's environment variables that are
    set (a blank one counts as unset; values stripped), which win over the keys they stand for."""
    given: dict[str, Any] = {norm_key(k): v for k, v in dict(ctx.options or {}).items()}
    for name in SpcOptions.env_names():
        value = ctx.env.get(name, "").strip()
        if value:
            given[name] = value
    return given


def _group_sources(
    ctx: ProviderContext, given: Mapping[str, Any]
) -> tuple[tuple[Mapping[str, Any], ...] | None, tuple[Gen1Group, ...], tuple[tuple[int, int, str], ...]]:
    """The node-pools file's pools (None: list them) and the `--nodes` groups."""
    pools_override = None
    if "SPC_NODE_POOLS_FILE" in given:
        pools_file, where = given["SPC_NODE_POOLS_FILE"], "SPC_NODE_POOLS_FILE"
    else:
        pools_file, where = given.get("node-pools-file"), "spc.node-pools-file"
    if pools_file:
        path = Path(str(pools_file))
        # the fork used the ConfigMap only "if it exists"; a mounted optional ConfigMap may be absent
        if path.exists():
            pools_override = read_pools_file(path, where)
    return (pools_override, *read_nodes(ctx))


def load_config(ctx: ProviderContext) -> SpcConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem, in
    the order they were always checked: an unknown key, the required inputs (every one missing at
    once), the node-pools file and --nodes, the other options."""
    given = options_input(ctx)
    try:
        options = SpcOptions.model_validate(given, context={"emulate": ctx.emulate})
    except ValidationError as exc:
        told = told_in_order(exc, where_in(SpcOptions, "spc"), SpcOptions)
        if told[0][1] is None:
            raise told[0][0] from None
        raise_all([problem for problem, name in told if name in SpcOptions.REQUIRED])
        _group_sources(ctx, given)
        raise told[0][0] from None
    pools_override, gen1, narrow = _group_sources(ctx, given)
    return SpcConfig(
        api_url=options.api_url or DEFAULT_API_URL,
        token=options.token,
        org_id=int(options.organization_id or 0),
        cluster_id=int(options.cluster_id or 0),
        pools_override=pools_override,
        gen1=gen1,
        narrow=narrow,
        draft_timeout=options.draft_timeout,
        provider_id_template=options.provider_id_template,
        reserved=options.reserved,
        tuning=options.tuning(TUNING),
        emulator=options.emulator,
    )
