"""AliCloud configuration: the in-tree provider's inputs, accepted verbatim, plus our options.

In-tree facts (kubernetes/autoscaler `cluster-autoscaler/cloudprovider/alicloud/` at 55c37cd):
- node groups only from `--nodes=MIN:MAX:<ScalingGroupId>`; bounds from the flag, not from ESS;
- credentials from the environment, first complete mode wins: AK/SK (`ACCESS_KEY_ID`,
  `ACCESS_KEY_SECRET`, `REGION_ID`), then RRSA (`ALIBABA_CLOUD_OIDC_PROVIDER_ARN`,
  `ALIBABA_CLOUD_OIDC_TOKEN_FILE`, `ALIBABA_CLOUD_ROLE_ARN`, `ALIBABA_CLOUD_SESSION_NAME`, each
  with its older `ALICLOUD_*` name as fallback, kubernetes/autoscaler #8170), then the ECS RAM role
  from the metadata server (`METADATA_ENDPOINT` overrides its address);
- `--cloud-config` is read by gcfg into a flat struct, so no real file can set anything; we accept
  the file and, as an extension, a `[global]` section with the struct's field names.

New here, documented in the README: endpoint overrides (`ALICLOUD_ESS_ENDPOINT`,
`ALICLOUD_ECS_ENDPOINT`, `ALICLOUD_VPC_ENDPOINT`, `ALICLOUD_STS_ENDPOINT` or the `alicloud:` YAML
section) instead of the
Location service lookup, and stricter validation: a credential mode given in part is an error
naming the missing variable (in-tree silently fell through to the next mode).

The YAML section, the environment variables, the cloud-config file's values and --nodes are the
inputs of one model, `AliOptions` (pydantic, on the shared types of option_models.py: each variable
and file value an alias of its key); the credential mode is chosen from them by
credentials.py. `load_config` reads the file into the model's input.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AliasChoices, BeforeValidator, Field, ValidationInfo, field_validator

from cloudprovider_grpc.core.errors import ConfigError, unknown_key
from cloudprovider_grpc.providers.alicloud.credentials import (
    RRSA_VARS,
    Credentials,
    choose_credentials,
)
from cloudprovider_grpc.providers.alicloud.emulator_options import EmulatorOptions
from cloudprovider_grpc.providers.driver import GroupConfig
from cloudprovider_grpc.providers.option_models import (
    OR_DEFAULTS,
    Problem,
    Reserved,
    TuningOptions,
    model_input,
    validated,
)
from cloudprovider_grpc.providers.options import ClientTuning
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext

log = logging.getLogger(__name__)

#: the region used with --emulate when none is given
EMULATOR_REGION = "cn-hangzhou"

#: the in-tree struct's gcfg variables (gcfg matches names in any case); a value read from the
#: file is the model's input `cloud-config [global] <Name>`, named in errors as the file spells it
_FILE_NAMES = (
    "RegionId",
    "AccessKeyID",
    "AccessKeySecret",
    "OIDCProviderARN",
    "OIDCTokenFilePath",
    "RoleARN",
    "RoleSessionName",
)
_FILE_KEYS = {name.lower(): f"cloud-config [global] {name}" for name in _FILE_NAMES}
#: the inputs that are not keys of the section: the --nodes values, and the credentials chosen
#: from the variables and the file (names with a space: never a key)
NODES = "--nodes values"
CHOSEN = "the chosen credentials"
_REGION_RE = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+$")
_GROUP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-_]{0,127}$")
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): a new ESS instance
#: stays `Pending` this long. Alibaba Cloud publishes no figure for an ECS instance to start and join
#: (none is documented); 120 s is this project's assumption, stated in every report that uses it.
#: A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"pending-seconds": 120.0, "removing-seconds": 30.0}
REMOVE_POLICIES = ("release", "recycle")


#: HTTP client defaults (ESS throttles per account with `x-acs-retry-after`; ours only smooths bursts)
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=20.0)


_TAG_KEY_RE = re.compile(r"^[^\s=,][^=,]{0,127}$")


def _discovery(value: Any) -> dict[str, str]:
    """`asg:tag=<key>[=<value>],...` (CA's AWS auto-discovery format) or `{tags: {key: value}}`."""
    if value in (None, "", {}):
        return {}
    tags: dict[str, str] = {}
    if isinstance(value, str):
        kind, _, rest = value.strip().partition(":")
        if kind != "asg" or not rest.startswith("tag="):
            raise Problem(f"{value!r} is not asg:tag=<key>[=<value>],...")
        for item in rest.removeprefix("tag=").split(","):
            key, _, tag_value = item.strip().partition("=")
            tags[key] = tag_value
    elif isinstance(value, Mapping) and set(value) == {"tags"} and isinstance(value["tags"], Mapping):
        tags = {str(k): "" if v is None else str(v) for k, v in value["tags"].items()}
    else:
        raise Problem("expected asg:tag=<key>[=<value>],... or {tags: {key: value}}")
    if not tags or len(tags) > 20:
        raise Problem("give 1 to 20 tags")
    for key in tags:
        if not _TAG_KEY_RE.match(key):
            raise Problem(f"{key!r} is not a tag key")
    return tags


def _remove_policy(value: Any) -> str:
    policy = str(value).strip()
    if policy not in REMOVE_POLICIES:
        raise Problem(f"{policy!r} is not one of {', '.join(REMOVE_POLICIES)}")
    return policy


def _inputs(field: str) -> AliasChoices:
    """A credential's inputs: its variables (the newer name first), then the file's value."""
    names = (*RRSA_VARS.get(field, ()), *_CREDENTIAL_VARS.get(field, ()))
    return AliasChoices(*names, _FILE_KEYS[_FILE_VARS[field].lower()])


#: the AccessKey variables, and each credential's variable in the file
_CREDENTIAL_VARS = {"access_key_id": ("ACCESS_KEY_ID",), "access_key_secret": ("ACCESS_KEY_SECRET",)}
_FILE_VARS = {
    "access_key_id": "AccessKeyID",
    "access_key_secret": "AccessKeySecret",
    "oidc_provider_arn": "OIDCProviderARN",
    "oidc_token_file": "OIDCTokenFilePath",
    "role_arn": "RoleARN",
    "session_name": "RoleSessionName",
}


def _endpoint(variable: str, key: str) -> Any:
    return Field("", validation_alias=AliasChoices(variable, key))


class AliOptions(TuningOptions):
    """The `alicloud:` section of the YAML config, the environment variables and the cloud-config
    file's values (`cloud-config [global] <Name>`), each read in a key's place: the variable wins,
    then the file, then the key. The credentials' inputs are kept as given (`Named`, so a problem
    names where each came from) and the mode is chosen from them; the --nodes values become the
    node groups."""

    SUGGEST = True  # a misspelt key is answered with the nearest one, as on the other clouds

    NULL_IS_EMPTY = True

    remove_policy: Annotated[str, BeforeValidator(_remove_policy)] = "release"
    #: API endpoints instead of the Location service lookup (ALICLOUD_<PRODUCT>_ENDPOINT wins)
    ess_endpoint: str = _endpoint("ALICLOUD_ESS_ENDPOINT", "ess-endpoint")
    ecs_endpoint: str = _endpoint("ALICLOUD_ECS_ENDPOINT", "ecs-endpoint")
    vpc_endpoint: str = _endpoint("ALICLOUD_VPC_ENDPOINT", "vpc-endpoint")
    sts_endpoint: str = _endpoint("ALICLOUD_STS_ENDPOINT", "sts-endpoint")
    #: the ECS metadata server (METADATA_ENDPOINT wins)
    metadata_endpoint: str = Field(
        "http://100.100.100.200/", validation_alias=AliasChoices("METADATA_ENDPOINT", "metadata-endpoint")
    )
    #: groups discovered by ESS tags (an empty value matches any value); empty: only --nodes groups
    auto_discovery: Annotated[dict[str, str], BeforeValidator(_discovery)] = {}
    reserved: Reserved = {}
    emulator: Annotated[EmulatorOptions, OR_DEFAULTS] = EmulatorOptions()
    access_key_id: Any = Field("", validation_alias=_inputs("access_key_id"))
    access_key_secret: Any = Field("", validation_alias=_inputs("access_key_secret"), repr=False)
    oidc_provider_arn: Any = Field("", validation_alias=_inputs("oidc_provider_arn"))
    oidc_token_file: Any = Field("", validation_alias=_inputs("oidc_token_file"))
    role_arn: Any = Field("", validation_alias=_inputs("role_arn"))
    session_name: Any = Field("", validation_alias=_inputs("session_name"), repr=False)
    credentials: Credentials | None = Field(None, validation_alias=CHOSEN, validate_default=True)
    region: str = Field(
        "",
        validation_alias=AliasChoices("REGION_ID", _FILE_KEYS["regionid"], "region"),
        validate_default=True,
    )
    groups: tuple[GroupConfig, ...] = Field((), validation_alias=NODES, validate_default=True)

    @field_validator("ess_endpoint", "ecs_endpoint", "vpc_endpoint", "sts_endpoint", mode="before")
    @classmethod
    def _api(cls, value: Any) -> str:
        text = "" if value is None else str(value)
        return _checked_url(text) if text else ""

    @field_validator("metadata_endpoint", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> str:
        text = "" if value is None else str(value)
        return _checked_url(text) if text else "http://100.100.100.200/"

    @field_validator("credentials", mode="before")
    @classmethod
    def _choose(cls, value: Any, info: ValidationInfo) -> Credentials:
        def pick(field: str) -> tuple[str, str]:
            given = info.data.get(field) or ""
            default = (*RRSA_VARS.get(field, ()), *_CREDENTIAL_VARS.get(field, ()))[0]
            return str(given), getattr(given, "name", default)

        try:
            return choose_credentials(pick, bool((info.context or {}).get("emulate")))
        except ConfigError as exc:
            raise Problem(exc.problem, key=exc.key) from None

    @field_validator("region", mode="before")
    @classmethod
    def _region(cls, value: Any, info: ValidationInfo) -> str:
        region = ("" if value is None else str(value)).strip()
        if not region and (info.context or {}).get("emulate"):
            region = EMULATOR_REGION
        if region and not _REGION_RE.match(region):
            raise Problem(
                f"{region!r} is not a region id (e.g. cn-hangzhou)", key=getattr(value, "name", None)
            )
        creds = info.data.get("credentials")
        if not region and creds is not None and creds.mode != "ecs-ram-role":
            raise Problem(f"is required with {creds.mode} credentials and missing", key="REGION_ID")
        return region

    @field_validator("groups", mode="before")
    @classmethod
    def _groups(cls, value: Any, info: ValidationInfo) -> tuple[GroupConfig, ...]:
        try:
            return _groups(
                value or (), info.data.get("auto_discovery") or {}, bool((info.context or {}).get("emulate"))
            )
        except ConfigError as exc:
            raise Problem(exc.problem, key=exc.key) from None


#: the order the inputs were always checked in: the YAML section's own keys (every problem at
#: once), the cloud-config file, the credentials, the region, --nodes, the endpoints, the metadata server
_SECTION_FIELDS = frozenset(
    {*TuningOptions.model_fields, "remove_policy", "auto_discovery", "reserved", "emulator"}
)
_PHASES = (
    {"credentials"},
    {"region"},
    {"groups"},
    {"ess_endpoint"},
    {"ecs_endpoint"},
    {"vpc_endpoint"},
    {"sts_endpoint"},
    {"metadata_endpoint"},
)


class Named(str):
    """A value read in a key's place, with the name a problem of it is told under (`ACCESS_KEY_ID`,
    `cloud-config [global] accesskeyid`)."""

    name: str

    def __new__(cls, value: str, name: str) -> Named:
        named = super().__new__(cls, value)
        named.name = name
        return named


@dataclass(frozen=True)
class AliConfig:
    groups: tuple[GroupConfig, ...]
    credentials: Credentials
    region: str = ""
    ess_endpoint: str = ""
    ecs_endpoint: str = ""
    vpc_endpoint: str = ""
    sts_endpoint: str = ""
    metadata_endpoint: str = "http://100.100.100.200"
    remove_policy: str = "release"
    reserved: Mapping[str, str] = field(default_factory=dict)
    tuning: ClientTuning = field(default_factory=lambda: TUNING)
    emulator: EmulatorOptions = field(default_factory=EmulatorOptions)
    #: True when the groups are the emulator's demo groups (no --nodes with --emulate)
    demo_groups: bool = False
    #: groups discovered on every listing by these ESS tags (an empty value matches any value);
    #: empty: only the --nodes groups (in-tree)
    discovery_tags: Mapping[str, str] = field(default_factory=dict)


def _checked_url(value: str) -> str:
    """An endpoint: a full http(s) URL, or a bare host[:port] (https is meant)."""
    value = value.strip()
    if "://" not in value:
        value = f"https://{value}"
    try:
        parts = urlsplit(value)
    except ValueError:  # a bracketed host that is no IPv6 address (`[]`)
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem(f"{value!r} is not a host or an http(s) URL")
    return value if value.endswith("/") else value + "/"


def _read_cloud_config(path: Path) -> dict[str, Named]:
    """The gcfg file's `[global]` values, as the model's inputs (a blank one is not given)."""
    from cloudprovider_grpc.formats.gcfg import parse_gcfg

    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("cloud-config", f"cannot read {path}: {exc.strerror or exc}") from exc
    out: dict[str, Named] = {}
    for sec in parse_gcfg(text):
        if sec.name != "global" or sec.sub is not None:
            raise ConfigError(f"cloud-config {sec.label()}", "unknown section (only [global] is read)")
        for key, values in sec.values.items():
            where = f"cloud-config [global] {key}"
            alias = _FILE_KEYS.get(key.lower())
            if alias is None:
                raise unknown_key(where, key, _FILE_NAMES)
            out.pop(alias, None)
            if values and values[-1].strip():
                out[alias] = Named(values[-1], where)
    return out


def _groups(
    specs: Sequence[NodesSpec], discovery: Mapping[str, str], emulate: bool
) -> tuple[GroupConfig, ...]:
    """The --nodes groups (in-tree: the only source); with --emulate and none, the demo groups."""
    groups: list[GroupConfig] = []
    seen: set[str] = set()
    for spec in specs:
        if not _GROUP_ID_RE.match(spec.name):
            raise ConfigError(f"nodes ({spec.name})", "is not a scaling group id (e.g. asg-bp1...)")
        if spec.name in seen:
            raise ConfigError(f"nodes ({spec.name})", "is given twice")
        seen.add(spec.name)
        groups.append(
            GroupConfig(
                id=spec.name,
                min_size=spec.min_size,
                max_size=spec.max_size,
                debug=f"{spec.name} ({spec.min_size}:{spec.max_size})",
                name=spec.name,
            )
        )
    if groups or discovery:
        return tuple(groups)
    if not emulate:
        raise ConfigError(
            "nodes",
            "no node groups: give --nodes=MIN:MAX:<ScalingGroupId> (repeatable), as in-tree, "
            "or alicloud.auto-discovery",
        )
    from cloudprovider_grpc.emulators.alicloud.seed import DEMO_GROUPS

    return tuple(
        GroupConfig(
            id=g["ScalingGroupId"],
            min_size=g["MinSize"],
            max_size=g["MaxSize"],
            debug=f"{g['ScalingGroupId']} ({g['MinSize']}:{g['MaxSize']})",
            name=g["ScalingGroupName"],
        )
        for g in DEMO_GROUPS
    )


def load_config(ctx: ProviderContext) -> AliConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem."""
    file: dict[str, Named] = {}
    file_problem = None
    if ctx.cloud_config is not None:
        try:
            file = _read_cloud_config(ctx.cloud_config)
        except ConfigError as exc:
            file_problem = exc
    given = model_input(AliOptions, ctx.options, ctx.env)
    if isinstance(given, dict):
        inputs = AliOptions.env_names()
        given = {k: Named(v, k) if k in inputs and isinstance(v, str) else v for k, v in given.items()}
        given.update({**file, NODES: tuple(ctx.nodes)})
    opts = validated(
        AliOptions,
        given,
        "alicloud",
        context={"emulate": ctx.emulate},
        section=_SECTION_FIELDS,
        phases=_PHASES,
        file_problem=file_problem,
    )
    creds = opts.credentials or Credentials("ecs-ram-role")
    metadata = opts.metadata_endpoint
    demo = not ctx.nodes and not opts.auto_discovery

    config = AliConfig(
        groups=opts.groups,
        credentials=creds,
        region=opts.region,
        ess_endpoint=opts.ess_endpoint,
        ecs_endpoint=opts.ecs_endpoint,
        vpc_endpoint=opts.vpc_endpoint,
        sts_endpoint=opts.sts_endpoint,
        metadata_endpoint=metadata,
        remove_policy=opts.remove_policy,
        reserved=opts.reserved,
        tuning=opts.tuning(TUNING),
        emulator=opts.emulator,
        demo_groups=demo,
        discovery_tags=opts.auto_discovery,
    )
    if creds.mode == "ecs-ram-role":
        # the last resort, chosen silently in-tree: say so, or a Refresh failing against the metadata
        # server off ECS is the first sign of missing credentials
        log.warning(
            "alicloud: no AccessKey (ACCESS_KEY_ID, ACCESS_KEY_SECRET) or RRSA "
            "(ALIBABA_CLOUD_OIDC_PROVIDER_ARN, ALIBABA_CLOUD_OIDC_TOKEN_FILE, ALIBABA_CLOUD_ROLE_ARN) "
            "credentials found; using the ECS RAM role from the metadata server at %s, which answers "
            "only on an ECS instance with a RAM role attached",
            metadata,
        )
    return config
