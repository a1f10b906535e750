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
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cloudprovider_grpc.errors import ConfigError
from cloudprovider_grpc.providers.registry import NodesSpec, ProviderContext

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
_TOP_KEYS = frozenset(
    {
        "cluster_id",
        "api_url",
        "reserved",
        "connect_timeout",
        "read_timeout",
        "retries",
        "retry_budget",
        "rate_limit",
        "page_size",
        "catalog_ttl",
        "emulator",
    }
)
_EMULATOR_KEYS = frozenset({"provision_seconds", "rate_limit", "page_size", "node_limit", "region", "pools"})
_EMULATOR_POOL_KEYS = frozenset(
    {"label", "plan", "node_quantity", "min_nodes", "max_nodes", "auto_scaler", "labels", "taints"}
)
#: cluster ids go into URL paths; VKE's are UUIDs, anything else could escape the path
_CLUSTER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
#: visible ASCII only: a token is sent in an HTTP header
_HEADER_SAFE_RE = re.compile(r"^[\x21-\x7e]+$")


@dataclass(frozen=True)
class EmulatorPool:
    """One node pool the emulator seeds into the cluster (see emulator_seed.DEMO_POOLS)."""

    label: str
    plan: str
    node_quantity: int = 1
    min_nodes: int = 1
    max_nodes: int = 10
    auto_scaler: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class EmulatorOptions:
    """How `--emulate` seeds the emulated cloud (see providers/vultr/emulator.py)."""

    provision_seconds: float = 5.0
    #: Vultr documents 30 requests/s per IP before 429 (API v2 introduction)
    rate_limit: float | None = 30.0
    page_size: int = 100
    #: nodes the account may run in total; None for no limit (PATCH beyond it answers 400)
    node_limit: int | None = None
    region: str = "ewr"
    #: None: the demo pools
    pools: tuple[EmulatorPool, ...] | None = None


@dataclass(frozen=True)
class VultrConfig:
    cluster_id: str
    token: str = field(default="", repr=False)
    api_url: str = DEFAULT_API_URL
    #: --nodes specs: narrow the discovered pools (by id or label) and override their bounds
    nodes: tuple[NodesSpec, ...] = ()
    reserved: Mapping[str, str] = field(default_factory=dict)
    connect_timeout: float = 3.05
    read_timeout: float = 4.0
    #: govultr retries 429/5xx/connection errors 3 times (govultr.go SetRetryLimit default)
    retries: int = 3
    #: seconds one API call may spend retrying; Refresh lists synchronously, so this stays under
    #: CA's grpc_timeout (5 s by default, 10 s in our manifests)
    retry_budget: float = 8.0
    #: requests per second we allow ourselves; the API answers 429 above 30/s per IP
    rate_limit: float = 20.0
    #: node pools per list page (the API's documented usual default)
    page_size: int = 100
    catalog_ttl: float = 3600.0
    emulator: EmulatorOptions = field(default_factory=EmulatorOptions)
    #: problems that are not fatal (min 0 treated as 1); check-config and serve log them
    warnings: tuple[str, ...] = ()


def _norm(key: object) -> str:
    return str(key).strip().lower().replace("-", "_")


def check_token(token: str, where: str) -> str:
    """The token stripped of surrounding whitespace (a Secret file's trailing newline), and safe to
    put in an Authorization header. The message never quotes the token."""
    token = token.strip()
    if token and not _HEADER_SAFE_RE.match(token):
        raise ConfigError(where, "contains spaces or characters not allowed in an HTTP header")
    return token


def _read_cloud_config(path: Path) -> dict[str, str]:
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
    for key, value in data.items():
        if key not in _FILE_KEYS:
            raise ConfigError(f"cloud-config {key}", f"unknown key (known: {', '.join(sorted(_FILE_KEYS))})")
        if not isinstance(value, str):
            raise ConfigError(f"cloud-config {key}", f"expected a string, got {type(value).__name__}")
        out[key] = value
    return out


def _float(value: Any, where: str, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool):
        raise ConfigError(where, f"{value!r} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(where, f"{value!r} is not a number") from None
    if f < 0 or (not allow_zero and f == 0):
        raise ConfigError(where, f"must be {'at least 0' if allow_zero else 'above 0'}, got {f:g}")
    return f


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(where, f"expected an integer of at least {minimum}, got {value!r}")
    return value


def _api_url(value: str, where: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where, f"{value!r} is not an http(s) URL")
    # request paths are absolute (/v2/...), as in govultr; a trailing /v2 is accepted and dropped
    base = value.strip().rstrip("/")
    base = base.removesuffix("/v2")
    return base + "/"


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(where, "expected a mapping of strings")
    return {str(k): str(v) for k, v in value.items()}


def _emulator_pool(raw: Any, where: str) -> EmulatorPool:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, "expected a mapping")
    opts = {_norm(k): v for k, v in raw.items()}
    for k in opts:
        if k not in _EMULATOR_POOL_KEYS:
            raise ConfigError(
                f"{where}.{k}", f"unknown key (known: {', '.join(sorted(_EMULATOR_POOL_KEYS))})"
            )
    for k in ("label", "plan"):
        if not isinstance(opts.get(k), str) or not opts[k]:
            raise ConfigError(f"{where}.{k}", "missing (a non-empty string)")
    taints = opts.get("taints") or []
    if not isinstance(taints, list) or not all(isinstance(t, Mapping) and "key" in t for t in taints):
        raise ConfigError(f"{where}.taints", "expected a list of {key, value, effect}")
    pool = EmulatorPool(
        label=opts["label"],
        plan=opts["plan"],
        node_quantity=_int(opts.get("node_quantity", 1), f"{where}.node_quantity", minimum=1),
        min_nodes=_int(opts.get("min_nodes", 1), f"{where}.min_nodes"),
        max_nodes=_int(opts.get("max_nodes", 10), f"{where}.max_nodes", minimum=1),
        auto_scaler=bool(opts.get("auto_scaler", True)),
        labels=_string_map(opts.get("labels") or {}, f"{where}.labels"),
        taints=tuple({str(k): str(v) for k, v in t.items()} for t in taints),
    )
    if pool.min_nodes > pool.max_nodes:
        raise ConfigError(f"{where}.min_nodes", f"{pool.min_nodes} is above max_nodes {pool.max_nodes}")
    return pool


def _emulator(value: Any) -> EmulatorOptions:
    if not isinstance(value, Mapping):
        raise ConfigError("vultr.emulator", "expected a mapping")
    emu = {_norm(k): v for k, v in value.items()}
    for k in emu:
        if k not in _EMULATOR_KEYS:
            raise ConfigError(
                f"vultr.emulator.{k}", f"unknown option (known: {', '.join(sorted(_EMULATOR_KEYS))})"
            )
    defaults = EmulatorOptions()
    pools = None
    if "pools" in emu:
        if not isinstance(emu["pools"], list) or not emu["pools"]:
            raise ConfigError("vultr.emulator.pools", "expected a non-empty list of pools")
        pools = tuple(_emulator_pool(p, f"vultr.emulator.pools[{i}]") for i, p in enumerate(emu["pools"]))
    rate = emu.get("rate_limit", defaults.rate_limit)
    limit = emu.get("node_limit")
    return EmulatorOptions(
        provision_seconds=_float(emu.get("provision_seconds", defaults.provision_seconds),
                                 "vultr.emulator.provision_seconds"),
        rate_limit=_float(rate, "vultr.emulator.rate_limit", allow_zero=False) if rate else None,
        page_size=_int(emu.get("page_size", defaults.page_size), "vultr.emulator.page_size", minimum=1),
        node_limit=_int(limit, "vultr.emulator.node_limit") if limit is not None else None,
        region=str(emu.get("region") or defaults.region),
        pools=pools,
    )  # fmt: skip


def load_config(ctx: ProviderContext) -> VultrConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem.
    No network I/O: the pools themselves are read from the cluster on each Refresh."""
    opts = {_norm(k): v for k, v in dict(ctx.options or {}).items()}
    for key in opts:
        if key not in _TOP_KEYS:
            raise ConfigError(f"vultr.{key}", f"unknown option (known: {', '.join(sorted(_TOP_KEYS))})")
    file = _read_cloud_config(ctx.cloud_config) if ctx.cloud_config is not None else {}
    env = ctx.env

    cluster_where = "vultr.cluster_id" if opts.get("cluster_id") else "cloud-config cluster_id"
    cluster_id = str(opts.get("cluster_id") or file.get("cluster_id") or "").strip()
    if not cluster_id:
        if not ctx.emulate:
            # in-tree wording: "empty cluster ID was supplied"
            raise ConfigError("cloud-config cluster_id", "empty cluster ID was supplied")
        cluster_id = EMULATOR_DEMO_CLUSTER
    if not _CLUSTER_ID_RE.match(cluster_id):
        raise ConfigError(cluster_where, f"{cluster_id!r} is not a VKE cluster id (a UUID)")

    if env.get(TOKEN_ENV, "").strip():
        token = check_token(env[TOKEN_ENV], TOKEN_ENV)
    else:
        token = check_token(file.get("token", ""), "cloud-config token")
    if not token:
        if not ctx.emulate:
            raise ConfigError(
                "cloud-config token", f"empty token was supplied (set it in the cloud-config or {TOKEN_ENV})"
            )
        token = EMULATOR_DEFAULT_TOKEN

    if env.get(API_URL_ENV, "").strip():
        api_url = _api_url(env[API_URL_ENV], API_URL_ENV)
    elif opts.get("api_url"):
        api_url = _api_url(str(opts["api_url"]), "vultr.api_url")
    elif file.get("api_url"):
        api_url = _api_url(file["api_url"], "cloud-config api_url")
    else:
        api_url = DEFAULT_API_URL

    warnings: list[str] = []
    for spec in ctx.nodes:
        if spec.min_size < VKE_MIN_POOL_NODES:
            warnings.append(
                f"nodes {spec.min_size}:{spec.max_size}:{spec.name}: VKE refuses pools below "
                f"{VKE_MIN_POOL_NODES} node; min size {spec.min_size} is treated as {VKE_MIN_POOL_NODES}"
            )
        if spec.max_size < VKE_MIN_POOL_NODES:
            raise ConfigError(f"nodes ({spec.name})", "max size 0: a VKE pool always has at least 1 node")

    reserved: dict[str, str] = {}
    res_opt = opts.get("reserved") or {}
    if not isinstance(res_opt, Mapping):
        raise ConfigError("vultr.reserved", "expected a mapping of resource name to quantity")
    for k, v in res_opt.items():
        if not _QUANTITY_RE.match(str(v)):
            raise ConfigError(f"vultr.reserved.{k}", f"{v!r} is not a Kubernetes quantity")
        reserved[str(k)] = str(v)

    config = VultrConfig(
        cluster_id=cluster_id,
        token=token,
        api_url=api_url,
        nodes=tuple(ctx.nodes),
        reserved=reserved,
        connect_timeout=_float(opts.get("connect_timeout", 3.05), "vultr.connect_timeout", allow_zero=False),
        read_timeout=_float(opts.get("read_timeout", 4.0), "vultr.read_timeout", allow_zero=False),
        retries=_int(opts.get("retries", 3), "vultr.retries"),
        retry_budget=_float(opts.get("retry_budget", 8.0), "vultr.retry_budget", allow_zero=False),
        rate_limit=_float(opts.get("rate_limit", 20.0), "vultr.rate_limit", allow_zero=False),
        page_size=_int(opts.get("page_size", 100), "vultr.page_size", minimum=1),
        catalog_ttl=_float(opts.get("catalog_ttl", 3600.0), "vultr.catalog_ttl"),
        emulator=_emulator(opts.get("emulator") or {}),
        warnings=tuple(warnings),
    )
    for w in config.warnings:
        log.warning("vultr: %s", w)
    return config
