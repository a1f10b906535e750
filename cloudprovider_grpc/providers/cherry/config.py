"""Cherry Servers configuration: the in-tree provider's inputs, accepted verbatim, plus our options.

Sources, later ones overriding earlier ones per key:
1. the in-tree gcfg cloud-config (`--cloud-config`): `[global]` and `[nodegroupdef "<pool>"]`;
2. the `cherry:` section of our YAML config (`ctx.options`), same key names, with `global:` and
   `pools: {<pool>: {...}}` standing for the two section kinds;
3. `--nodes=MIN:MAX:POOL` for group bounds, `--cluster-name` for pools without `cluster-name`;
4. the environment: `CHERRY_AUTH_TOKEN`, `BOOTSTRAP_TOKEN_ID`, `BOOTSTRAP_TOKEN_SECRET`,
   `CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL`, `CHERRY_MANAGER` (only "rest"), and our `CHERRY_API_URL`.

In-tree facts (kubernetes/autoscaler cluster-autoscaler/cloudprovider/cherryservers/cherry_manager_rest.go):
the default pool is `[nodegroupdef "default"]`, or `[global]` when there is none, and must not be empty;
a pool without its own section uses the default one; `project-id` and `api-server-endpoint` were
always taken from the default (we honour per-pool values); `cloudinit` is base64 of a Go template;
ssh key ids must be integers; a repeated single-valued key keeps its last value (gcfg).

The options are declared here as pydantic models: the `cherry:` section with the environment
variables read in a key's place (`CherryOptions`; its `emulator:` is emulator_options.py's), and one
pool's settings in the in-tree key names (`PoolSpec`, also what the driver reads). pool_sections.py
reads the file and the YAML pool sections (each value keeps the name of where it was given, so an
error names the file section, the YAML key or the environment variable); `load_config` merges them
into the models' input and resolves what the driver reads (`CherryConfig`). Every problem is
reported at startup as `ConfigError(key, problem)`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator, model_validator

from cloudprovider_grpc.core.errors import ConfigError, raise_all
from cloudprovider_grpc.formats.gotemplate import GoTemplate, TemplateError
from cloudprovider_grpc.providers.cherry.emulator_options import EmulatorOptions
from cloudprovider_grpc.providers.cherry.pool_sections import (
    BOUND_KEYS,
    RawSection,
    merge_yaml_pool,
    read_cloud_config,
)
from cloudprovider_grpc.providers.driver import CONTROL_PLANE_LABELS, GroupConfig
from cloudprovider_grpc.providers.option_models import (
    OR_DEFAULTS,
    Loc,
    OptionSection,
    Problem,
    Reserved,
    TuningOptions,
    checked,
    first_problem,
    told_in_order,
    where_in,
)
from cloudprovider_grpc.providers.options import ClientTuning, norm_key, read_int
from cloudprovider_grpc.providers.registry import ProviderContext

DEFAULT_API_URL = "https://api.cherryservers.com/v1/"
#: in-tree default of CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL
DEFAULT_CONTROLLER_LABEL = CONTROL_PLANE_LABELS[0]
CLOUDINIT_FIELDS = ("BootstrapTokenID", "BootstrapTokenSecret", "APIServerEndpoint", "NodeGroup")
HOSTNAME_FIELDS = ("ClusterName", "NodeGroup", "RandString8")


class CherryOptions(TuningOptions):
    """The `cherry:` section and the environment variables that stand for its keys (the variable
    wins). `global` and `pools` hold pool settings in the in-tree key names (see PoolSpec)."""

    manager: str = Field("", validation_alias="CHERRY_MANAGER")
    api_url: str = Field(DEFAULT_API_URL, validation_alias=AliasChoices("CHERRY_API_URL", "api-url"))
    #: for pools that set no `cluster-name` (--cluster-name wins)
    cluster_name: str = ""
    #: the default pool settings, as the cloud-config's [global], and pool name -> settings, as its
    #: [nodegroupdef "<pool>"]: read as written by pool_sections.py, whose errors name the section
    global_: Any = Field(None, alias="global")
    pools: Any = None
    controller_node_label: str = Field(
        DEFAULT_CONTROLLER_LABEL,
        validation_alias=AliasChoices("CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL", "controller-node-label"),
    )
    reserved: Reserved = Field(default_factory=dict)
    emulator: Annotated[EmulatorOptions, OR_DEFAULTS] = Field(default_factory=EmulatorOptions)

    @field_validator("manager", mode="before")
    @classmethod
    def _manager(cls, v: Any) -> str:
        if v not in ("", "rest"):
            raise Problem(f"{v!r} is not supported (only 'rest')")
        return str(v)

    @field_validator("api_url", mode="before")
    @classmethod
    def _url(cls, v: Any) -> str:
        value = str(v or DEFAULT_API_URL)
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise Problem(f"{value!r} is not an http(s) URL")
        return value if value.endswith("/") else value + "/"

    @field_validator("cluster_name", mode="before")
    @classmethod
    def _cluster(cls, v: Any) -> str:
        return str(v or "").strip()

    @field_validator("controller_node_label", mode="before")
    @classmethod
    def _label(cls, v: Any) -> str:
        return str(v or DEFAULT_CONTROLLER_LABEL)


def _count(v: Any) -> int:
    """A whole number of at least 0; blank is 0 (gcfg values are text)."""
    text = str(v)
    return 0 if text.strip() == "" else int(checked(read_int, text))


def _text(v: Any) -> str:
    return str(v).strip()


class PoolSpec(OptionSection):
    """Everything needed to create one server of a pool. Validated with the context
    `cluster_name` (--cluster-name), `bootstrap_token_id`, `bootstrap_token_secret` (the cloudinit's
    inputs from the environment); fields are checked in the order a user is told about them."""

    name: str
    cluster_name: str = Field("", validate_default=True)
    project_id: int = Field(0, validate_default=True)
    plan: str = Field("", validate_default=True)
    region: str = Field("", validate_default=True)
    os: str = Field("", validate_default=True)
    ssh_key_ids: tuple[int, ...] = ()
    api_server_endpoint: str = ""
    cloudinit: GoTemplate | None = None
    hostname_pattern: GoTemplate | None = None
    os_partition_size: int = 0
    #: GPUs per server of this pool, from the config: Cherry's plan specs carry no GPU entry (cherrygo's
    #: Specs and the API's plan schema list cpus, memory, storage, raid, nics, bandwidth only)
    gpu_count: int = 0
    #: the GPU type the template's GPU label carries (default: the plan's slug)
    gpu_type: str = ""

    @field_validator("cluster_name", mode="before")
    @classmethod
    def _cluster(cls, v: Any, info: ValidationInfo) -> str:
        cluster = _text(v) or str((info.context or {}).get("cluster_name") or "")
        if not cluster:
            raise Problem("missing: set cluster-name in the pool or --cluster-name")
        return cluster

    @field_validator("project_id", mode="before")
    @classmethod
    def _project(cls, v: Any) -> int:
        project = _count(v)
        if project <= 0:
            raise Problem("missing: the Cherry Servers project id (a positive integer)")
        return project

    @field_validator("plan", "region", "os", mode="before")
    @classmethod
    def _required(cls, v: Any) -> str:
        if not _text(v):
            raise Problem("missing")
        return _text(v)

    @field_validator("ssh_key_ids", mode="before")
    @classmethod
    def _ssh_keys(cls, values: Any) -> tuple[int, ...]:
        ids: list[int] = []
        for i, v in enumerate(x for x in values if x.strip()):
            try:
                key_id = int(v.strip(), 10)
            except ValueError:
                raise Problem(f"invalid ssh-key ID at position {i}: {v!r}; it must be an integer") from None
            if not -(2**31) <= key_id < 2**31:
                raise Problem(f"ssh-key ID {key_id} is out of range")
            ids.append(key_id)
        return tuple(ids)

    @field_validator("api_server_endpoint", "gpu_type", mode="before")
    @classmethod
    def _plain(cls, v: Any) -> str:
        return _text(v)

    @field_validator("cloudinit", mode="before")
    @classmethod
    def _cloudinit(cls, v: Any) -> GoTemplate | None:
        return _template(_decode_cloudinit(str(v)), CLOUDINIT_FIELDS) if _text(v) else None

    @field_validator("hostname_pattern", mode="before")
    @classmethod
    def _hostname(cls, v: Any) -> GoTemplate | None:
        return _template(_text(v), HOSTNAME_FIELDS) if _text(v) else None

    @field_validator("os_partition_size", "gpu_count", mode="before")
    @classmethod
    def _counts(cls, v: Any) -> int:
        return _count(v)

    @model_validator(mode="after")
    def _cloudinit_inputs(self, info: ValidationInfo) -> PoolSpec:
        """Every input the cloudinit uses is set (an empty one would render a broken join command)."""
        used = self.cloudinit.fields if self.cloudinit is not None else set()
        context = info.context or {}
        for fld, value, key in (
            ("BootstrapTokenID", context.get("bootstrap_token_id"), "BOOTSTRAP_TOKEN_ID"),
            ("BootstrapTokenSecret", context.get("bootstrap_token_secret"), "BOOTSTRAP_TOKEN_SECRET"),
            ("APIServerEndpoint", self.api_server_endpoint, None),
        ):
            if fld in used and not value:
                problem = f"is empty but the cloudinit of pool {self.name!r} uses {{{{.{fld}}}}}"
                raise Problem(problem, key=key, at=("api-server-endpoint",) if key is None else ())
        return self


def _decode_cloudinit(value: str) -> str:
    # Go's base64.StdEncoding (in-tree) requires padding and ignores CR/LF; so do we.
    compact = value.replace("\r", "").replace("\n", "").strip()
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise Problem("is not valid base64 (standard alphabet, padded)") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem("decodes to bytes that are not UTF-8 text") from None


def _template(source: str, allowed: tuple[str, ...]) -> GoTemplate:
    try:
        return GoTemplate.parse(source, allowed)
    except TemplateError as exc:
        raise Problem(str(exc)) from None


#: an emulated cloud needs some token; used only with --emulate when CHERRY_AUTH_TOKEN is unset
EMULATOR_DEFAULT_TOKEN = "cherry-emulator-token"
#: HTTP client defaults: Cherry documents 4 requests/s per client IP (api.cherryservers.com/doc)
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=4.0)

#: with --emulate, what a configuration that says nothing else gets: a demo project in the emulated
#: catalogue (plan, region and image exist in emulators/cherry/seed.py), cluster "demo", two pools
EMULATE_DEFAULTS = {"project-id": "1", "plan": "cloud_vps_4", "region": "eu_nord_1", "os": "ubuntu_24_04"}
EMULATE_CLUSTER = "demo"
EMULATE_POOLS = (("pool1", 0, 10), ("pool2", 0, 5))

#: keys of a pool section: PoolSpec's (in-tree), plus our group-bound extensions
_SECTION_KEYS = frozenset({*(PoolSpec.keys() - {"name"}), *BOUND_KEYS})
#: in-tree pool name rule (cherry_cloud_provider.go), at most 63 characters
_POOL_NAME_RE = re.compile(r"^[a-z0-9A-Z]+[a-z0-9A-Z\-._]*[a-z0-9A-Z]+$|^[a-z0-9A-Z]$")
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): a server stays
#: `deploying` this long. Cherry Servers publishes no deploy time (its API documentation,
#: https://api.cherryservers.com/doc/, gives none); 300 s is this project's assumption for bare metal,
#: stated in every report that uses it. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"deploy-seconds": 300.0}
#: the order options problems are told in (the order they were always checked in): an unknown key
#: and CHERRY_MANAGER before the pools, these after them, the client tuning last
_TOLD_ORDER = ("manager", "reserved", "emulator", "api_url")


@dataclass(frozen=True)
class CherryConfig:
    pools: Mapping[str, PoolSpec]
    groups: tuple[GroupConfig, ...]
    api_url: str = DEFAULT_API_URL
    token: str = field(default="", repr=False)
    bootstrap_token_id: str = field(default="", repr=False)
    bootstrap_token_secret: str = field(default="", repr=False)
    controller_label: str = DEFAULT_CONTROLLER_LABEL
    reserved: Mapping[str, str] = field(default_factory=dict)
    tuning: ClientTuning = field(default_factory=lambda: TUNING)
    emulator: EmulatorOptions = field(default_factory=EmulatorOptions)

    @property
    def project_ids(self) -> tuple[int, ...]:
        return tuple(sorted({p.project_id for p in self.pools.values()}))


# ---------------------------------------------------------------- the models' input


def _pool_where(name: str, sources: Mapping[str, str]) -> Callable[[Loc], str]:
    """A pool's key is named where its value was given, `pool "<name>" <key>` when it was not."""

    def where(loc: Loc) -> str:
        key = norm_key(loc[0]) if loc else ""
        return sources.get(key, f'pool "{name}" {key}')

    return where


def options_input(ctx: ProviderContext) -> dict[str, Any]:
    """CherryOptions' input: the `cherry:` section's keys, and the environment variables that are set
    (they win over the keys they stand for)."""
    given: dict[str, Any] = {norm_key(k): v for k, v in dict(ctx.options or {}).items()}
    for name in CherryOptions.env_names():
        if ctx.env.get(name, ""):
            given[name] = ctx.env[name]
    return given


def _options(given: Mapping[str, Any]) -> tuple[CherryOptions | None, ConfigError | None]:
    """The validated options, or the problem to tell once the pools are checked (the order they
    were always checked in). An unknown key or CHERRY_MANAGER is told at once."""
    try:
        return CherryOptions.model_validate(given), None
    except ValidationError as exc:
        told = told_in_order(exc, where_in(CherryOptions, "cherry"), CherryOptions, first=_TOLD_ORDER)
        problem, field_name = told[0]
        if field_name in (None, "manager"):
            raise problem from None
        return None, problem


# ---------------------------------------------------------------- assembly


def _sections(ctx: ProviderContext, opts: Mapping[str, Any]) -> tuple[RawSection, dict[str, RawSection]]:
    """The pool definition every pool starts from (`[nodegroupdef "default"]`, else `[global]`) and
    each named pool's own section: the cloud-config file's, with the `cherry:` section's keys merged
    over them."""
    glob, default, file_pools = (
        (None, None, {}) if ctx.cloud_config is None else read_cloud_config(ctx.cloud_config, _SECTION_KEYS)
    )
    glob = glob or RawSection()
    if "global" in opts:
        merge_yaml_pool(glob, opts["global"], "cherry.global", _SECTION_KEYS)
    pools_opt = opts.get("pools") or {}
    if not isinstance(pools_opt, Mapping):
        raise ConfigError("cherry.pools", "expected a mapping of pool name to settings")
    for name, section in pools_opt.items():
        if str(name) == "default":
            default = default or RawSection()
            merge_yaml_pool(default, section, "cherry.pools.default", _SECTION_KEYS)
        else:
            merge_yaml_pool(
                file_pools.setdefault(str(name), RawSection()), section, f"cherry.pools.{name}", _SECTION_KEYS
            )
    return default or glob, file_pools


def _bounds(ctx: ProviderContext, file_pools: Mapping[str, RawSection]) -> dict[str, tuple[int, int, str]]:
    """The node groups' sizes and where they were given: sections carrying min-size/max-size, then
    --nodes (which wins)."""
    bounds: dict[str, tuple[int, int, str]] = {}
    for name, raw in file_pools.items():
        if raw.get("min-size") or raw.get("max-size"):
            if raw.get("max-size") is None:
                raise ConfigError(f'pool "{name}" max-size', "missing (min-size is set)")
            lo, hi = raw.bound("min-size"), raw.bound("max-size")
            if lo > hi:
                where = raw.where("max-size", f'pool "{name}" max-size')
                raise ConfigError(where, f"min-size {lo} is above max-size {hi}")
            bounds[name] = (lo, hi, "config")
    for spec in ctx.nodes:
        bounds[spec.name] = (spec.min_size, spec.max_size, "--nodes")
    return bounds


def _token(
    ctx: ProviderContext,
    base: RawSection,
    file_pools: Mapping[str, RawSection],
    bounds: Mapping[str, tuple[int, int, str]],
) -> str:
    """The API token, once the three inputs a first run is most likely to lack (node groups, a pool
    definition, the token) are checked together and reported at once. Secrets are stripped (a
    Secret made with --from-file ends in a newline), header-safe and masked in logs."""
    missing: list[ConfigError] = []
    if not bounds:
        missing.append(
            ConfigError("nodes", "no node groups: give --nodes=MIN:MAX:POOL or pools with min-size/max-size")
        )
    if not any(
        k in base.values for k in ("cluster-name", "cloudinit", "region", "plan", "project-id")
    ) and not any(name in file_pools for name in bounds):
        where = "cloud-config" if ctx.cloud_config is not None else "--cloud-config"
        missing.append(
            ConfigError(
                where,
                'no [global] or [nodegroupdef "default"] pool definition (project-id, plan, region, ...): '
                "give the in-tree cloud-config file with --cloud-config, or a cherry: section in --config",
            )
        )
    token = ""
    try:
        token = ctx.secret(
            "CHERRY_AUTH_TOKEN",
            required=not ctx.emulate,
            default=EMULATOR_DEFAULT_TOKEN if ctx.emulate else "",
        )
    except ConfigError as exc:
        missing.append(exc)
    raise_all(missing)
    return token


def _pools(
    bounds: Mapping[str, tuple[int, int, str]],
    base: RawSection,
    file_pools: Mapping[str, RawSection],
    context: dict[str, Any],
) -> tuple[dict[str, PoolSpec], list[GroupConfig]]:
    """Each node group's validated pool (the base definition with its own section over it) and its
    GroupConfig, in name order."""
    pools: dict[str, PoolSpec] = {}
    groups: list[GroupConfig] = []
    for name, (lo, hi, origin) in sorted(bounds.items()):
        if len(name) > 63 or not _POOL_NAME_RE.match(name):
            raise ConfigError(
                f"nodes ({name})",
                "pool name must be 1-63 letters, digits, '-', '.', '_', starting and ending alphanumeric",
            )
        own = file_pools.get(name)
        merged = RawSection(dict(base.values))
        if own is not None:
            merged.values.update(own.values)
        given, sources = merged.pool_input(name)
        try:
            pools[name] = PoolSpec.model_validate(given, context=context)
        except ValidationError as exc:
            raise first_problem(exc, _pool_where(name, sources)) from None
        groups.append(GroupConfig(id=name, min_size=lo, max_size=hi, debug=f"cherry pool {name} ({origin})"))
    return pools, groups


def load_config(ctx: ProviderContext) -> CherryConfig:
    """Validate every input and build the configuration; raise ConfigError naming the problem (the
    missing node groups, pool definition and token all at once)."""
    opts = options_input(ctx)
    options, late = _options(opts)
    base, file_pools = _sections(ctx, opts)
    cluster_flag = (ctx.cluster_name or "").strip() or str(opts.get("cluster-name") or "").strip()
    bounds = _bounds(ctx, file_pools)
    if ctx.emulate:
        # a demo that needs nothing else: `serve --provider cherry --emulate`
        base = RawSection(
            {**{k: ([v], f"--emulate default {k}") for k, v in EMULATE_DEFAULTS.items()}, **base.values}
        )
        cluster_flag = cluster_flag or EMULATE_CLUSTER
        if not bounds:
            bounds = {name: (lo, hi, "--emulate default") for name, lo, hi in EMULATE_POOLS}
    token = _token(ctx, base, file_pools, bounds)
    boot_id = ctx.secret("BOOTSTRAP_TOKEN_ID")
    boot_secret = ctx.secret("BOOTSTRAP_TOKEN_SECRET")
    context = {
        "cluster_name": cluster_flag,
        "bootstrap_token_id": boot_id,
        "bootstrap_token_secret": boot_secret,
    }
    pools, groups = _pools(bounds, base, file_pools, context)
    if late is not None or options is None:
        raise late or ConfigError("cherry", "invalid options")
    return CherryConfig(
        pools=pools,
        groups=tuple(groups),
        api_url=options.api_url,
        token=token,
        bootstrap_token_id=boot_id,
        bootstrap_token_secret=boot_secret,
        controller_label=options.controller_node_label,
        reserved=options.reserved,
        tuning=options.tuning(TUNING),
        emulator=options.emulator,
    )
