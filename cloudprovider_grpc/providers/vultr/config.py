"""Vultr VKE configuration: the in-tree provider's inputs, accepted verbatim, plus our options.

Sources, later ones winning per key:
1. the in-tree cloud-config (`--cloud-config`, the Secret `cluster-autoscaler-cloud-config` key
   `cloud-config` mounted as a file): JSON `{"cluster_id": "...", "token": "..."}`. The in-tree README
   calls it INI, but its parser is `json.Unmarshal` (cluster-autoscaler/cloudprovider/vultr/
   vultr_manager.go); we accept exactly that JSON, plus the new optional key `api_url`;
2. the `vultr:` section of our YAML config (`ctx.options`): `cluster_id`, `api_url` and the tuning
   keys below (`-` and `_` are interchangeable);
3. the environment: `VULTR_API_KEY` (new; the name Vultr's own CLI and Terraform provider read) wins
   over the file's `token`, so the key can live in its own Secret; `VULTR_API_URL` (new) wins over
   `api_url`. A secrets directory offers its files as environment variables.

Groups are discovered from the cluster on every Refresh (pools with `auto_scaler: true`, bounds
`min_nodes`/`max_nodes`, as in-tree). `--nodes MIN:MAX:POOL` (new; in-tree ignored it) narrows the
set to the pools it names, by pool id or label, and overrides their bounds. VKE refuses pools below
one node (vultr/vultr-cloud-controller-manager#227), so a min of 0 is treated as 1 and reported.

The YAML section, the environment variables and the file's values are declared by `VultrOptions`
(pydantic, on the shared types of option_models.py: each variable and file value an alias of its
key); `load_config` reads the file into the model's input and checks --nodes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    Field,
    ValidationInfo,
    field_validator,
)

from cloudprovider_grpc.core.errors import ConfigError, ConfigErrors, did_you_mean
from cloudprovider_grpc.core.secrets import read_secret
from cloudprovider_grpc.providers.option_models import (
    OR_DEFAULTS,
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
from cloudprovider_grpc.providers.vultr.emulator_options import (
    PATH_SAFE_ID_RE,
    EmulatorOptions,
)

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.vultr.com/"
#: an emulated cloud needs some key; used only with --emulate when none is configured
EMULATOR_DEFAULT_TOKEN = "vultr-emulator-token"
#: the emulator's demo cluster, used with --emulate when no cluster_id is configured
EMULATOR_DEMO_CLUSTER = "4f7c5b2e-1d3a-4e8f-9a6b-2c0d7e1f3a5b"
TOKEN_ENV = "VULTR_API_KEY"
API_URL_ENV = "VULTR_API_URL"
#: VKE refuses node pools with fewer nodes than this (vultr-cloud-controller-manager#227)
VKE_MIN_POOL_NODES = 1

#: what the in-tree JSON may hold (token and cluster_id), plus our api_url
_FILE_KEYS = frozenset({"cluster_id", "token", "api_url"})
#: HTTP tuning: timeouts well under CA's 5 s deadline; govultr retries 429/5xx/connection errors 3
#: times (govultr.go SetRetryLimit default); 20 requests/s stays under the API's 30/s per IP
TUNING = ClientTuning(read_timeout=4.0, retries=3, rate_limit=20.0)
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): how long a new VKE node
#: stays `pending`. Vultr publishes no figure for a pool node to boot and join (none is
#: documented); 120 s is this project's assumption, stated in every report that uses it. A scenario's
#: `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"provision-seconds": 120.0}


class VultrOptions(TuningOptions):
    """The `vultr:` section of the YAML config, the environment variables and the in-tree file's
    values (`cloud-config <key>`, read by `_read_cloud_config`), each read in a key's place: the
    variable wins over the key, the key over the file (a key left empty does not hide the file's)."""

    SUGGEST = True
    AS_WRITTEN = True
    NULL_IS_EMPTY = True

    cluster_id: str = Field(
        "", validation_alias=AliasChoices("cluster-id", "cloud-config cluster_id"), validate_default=True
    )
    api_url: str = Field(
        DEFAULT_API_URL, validation_alias=AliasChoices(API_URL_ENV, "api-url", "cloud-config api_url")
    )
    reserved: Reserved = {}
    #: node pools per list page (the API's documented usual default)
    page_size: PositiveCount = 100
    emulator: Annotated[EmulatorOptions, OR_DEFAULTS] = EmulatorOptions()
    token: str = Field(
        "",
        validation_alias=AliasChoices(TOKEN_ENV, "cloud-config token"),
        repr=False,
        validate_default=True,
    )

    @field_validator("cluster_id", mode="before")
    @classmethod
    def _cluster(cls, value: Any, info: ValidationInfo) -> str:
        cluster_id = str(value or "").strip()
        context = info.context or {}
        if not cluster_id:
            if not context.get("emulate") and not context.get("cloud_config"):
                raise Problem(
                    "no VKE cluster given: pass the in-tree cloud-config file (JSON with cluster_id and "
                    "token) with --cloud-config, or set vultr.cluster_id in --config",
                    key="--cloud-config",
                )
            if not context.get("emulate"):
                # in-tree wording: "empty cluster ID was supplied"
                raise Problem("empty cluster ID was supplied", key="cloud-config cluster_id")
            cluster_id = EMULATOR_DEMO_CLUSTER
        if not PATH_SAFE_ID_RE.match(cluster_id):
            raise Problem(f"{cluster_id!r} is not a VKE cluster id (a UUID)")
        return cluster_id

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any, info: ValidationInfo) -> str:
        """Through the shared secret reader: stripped, header-safe, masked in every log; no message
        quotes it."""
        try:
            token = read_secret({TOKEN_ENV: value}, TOKEN_ENV)
        except ConfigError as exc:
            raise Problem(exc.problem) from None
        if token:
            return token
        if not (info.context or {}).get("emulate"):
            raise Problem(
                f"empty token was supplied (set it in the cloud-config or {TOKEN_ENV})",
                key="cloud-config token",
            )
        return EMULATOR_DEFAULT_TOKEN

    @field_validator("api_url", mode="before")
    @classmethod
    def _api_url(cls, value: Any) -> str:
        """Request paths are absolute (`/v2/...`), as in govultr; a base ending in /v2 is accepted."""
        if not value:
            return DEFAULT_API_URL
        return str(checked(read_url, value)).removesuffix("v2/")


#: the order the inputs were always checked in: the YAML section's own keys (every problem at
#: once), the cloud-config file, then the cluster, the token and the API's address
_SECTION_FIELDS = frozenset({*TuningOptions.model_fields, "reserved", "page_size", "emulator"})
_PHASES = ({"cluster_id"}, {"token"}, {"api_url"})


@dataclass(frozen=True)
class VultrConfig:
    cluster_id: str
    token: str = field(default="", repr=False)
    api_url: str = DEFAULT_API_URL
    #: --nodes specs: narrow the discovered pools (by id or label) and override their bounds
    nodes: tuple[NodesSpec, ...] = ()
    reserved: Mapping[str, str] = field(default_factory=dict)
    tuning: ClientTuning = field(default_factory=lambda: TUNING)
    #: node pools per list page (the API's documented usual default)
    page_size: int = 100
    emulator: EmulatorOptions = field(default_factory=EmulatorOptions)
    #: problems that are not fatal (min 0 treated as 1); check-config and serve log them
    warnings: tuple[str, ...] = ()


def _read_cloud_config(path: Path, warnings: list[str]) -> dict[str, str]:
    """The in-tree file, decoded as Go's `json.Unmarshal` into its struct does: keys match
    case-insensitively, unknown keys are ignored (we say so in a warning), `null` is empty, any other
    non-string value is an error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("cloud-config", f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise ConfigError("cloud-config", f"{path} is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "cloud-config", f"{path} is not JSON ({exc.msg} at line {exc.lineno}); expected "
            '{"cluster_id": "...", "token": "..."}'
        ) from None  # fmt: skip
    if not isinstance(data, dict):
        raise ConfigError("cloud-config", f"{path} must hold a JSON object")
    out: dict[str, str] = {}
    for raw_key, value in data.items():
        key = raw_key.lower()
        if key not in _FILE_KEYS:
            hint = did_you_mean(key, _FILE_KEYS) or f" (known: {', '.join(sorted(_FILE_KEYS))})"
            warnings.append(f"cloud-config: ignoring unknown key {raw_key!r}{hint}")
            continue
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise ConfigError(f"cloud-config {key}", f"expected a string, got {type(value).__name__}")
        out[key] = value  # a repeated key: the later one wins, as in Go
    return out


def load_config(ctx: ProviderContext) -> VultrConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem.
    No network I/O: the pools themselves are read from the cluster on each Refresh."""
    warnings: list[str] = []
    file: dict[str, str] = {}
    file_problem = None
    if ctx.cloud_config is not None:
        try:
            file = _read_cloud_config(ctx.cloud_config, warnings)
        except ConfigError as exc:
            file_problem = exc
    given = model_input(VultrOptions, ctx.options, ctx.env)
    if isinstance(given, dict):
        given.update({f"cloud-config {key}": value for key, value in file.items()})
    try:
        opts = validated(
            VultrOptions,
            given,
            "vultr",
            context={"emulate": ctx.emulate, "cloud_config": ctx.cloud_config is not None},
            section=_SECTION_FIELDS,
            phases=_PHASES,
            file_problem=file_problem,
        )
    except ConfigError as exc:
        if not warnings:
            raise
        # an ignored key is often the cause (`clusterid` for `cluster_id`): name it in the same line
        problems = exc.problems if isinstance(exc, ConfigErrors) else [exc]
        ignored = [ConfigError("cloud-config", w.removeprefix("cloud-config: ")) for w in warnings]
        raise ConfigErrors([*problems, *ignored]) from None

    for spec in ctx.nodes:
        if spec.min_size < VKE_MIN_POOL_NODES:
            warnings.append(
                f"nodes {spec.min_size}:{spec.max_size}:{spec.name}: VKE refuses pools below "
                f"{VKE_MIN_POOL_NODES} node; min size {spec.min_size} is treated as {VKE_MIN_POOL_NODES}"
            )
        if spec.max_size < VKE_MIN_POOL_NODES:
            raise ConfigError(f"nodes ({spec.name})", "max size 0: a VKE pool always has at least 1 node")

    config = VultrConfig(
        cluster_id=opts.cluster_id,
        token=opts.token,
        api_url=opts.api_url,
        nodes=tuple(ctx.nodes),
        reserved=opts.reserved,
        tuning=opts.tuning(TUNING),
        page_size=opts.page_size,
        emulator=opts.emulator,
        warnings=tuple(warnings),
    )
    for w in config.warnings:
        log.warning("vultr: %s", w)
    return config
