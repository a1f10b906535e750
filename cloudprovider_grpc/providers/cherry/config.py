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
ssh key ids must be integers. Every problem is reported at startup as `ConfigError(key, problem)`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cloudprovider_grpc.core.errors import ConfigError, raise_all, unknown_key
from cloudprovider_grpc.formats.gcfg import parse_gcfg
from cloudprovider_grpc.formats.gotemplate import GoTemplate, TemplateError
from cloudprovider_grpc.providers.driver import CONTROL_PLANE_LABELS, GroupConfig
from cloudprovider_grpc.providers.options import ClientTuning, norm_key, read_float, read_reserved
from cloudprovider_grpc.providers.registry import ProviderContext

DEFAULT_API_URL = "https://api.cherryservers.com/v1/"
#: in-tree default of CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL
DEFAULT_CONTROLLER_LABEL = CONTROL_PLANE_LABELS[0]
#: an emulated cloud needs some token; used only with --emulate when CHERRY_AUTH_TOKEN is unset
EMULATOR_DEFAULT_TOKEN = "cherry-emulator-token"
#: HTTP client defaults: Cherry documents 4 requests/s per client IP (api.cherryservers.com/doc)
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=4.0)

#: with --emulate, what a configuration that says nothing else gets: a demo project in the emulated
#: catalogue (plan, region and image exist in emulators/cherry/seed.py), cluster "demo", two pools
EMULATE_DEFAULTS = {"project-id": "1", "plan": "cloud_vps_4", "region": "eu_nord_1", "os": "ubuntu_24_04"}
EMULATE_CLUSTER = "demo"
EMULATE_POOLS = (("pool1", 0, 10), ("pool2", 0, 5))

CLOUDINIT_FIELDS = ("BootstrapTokenID", "BootstrapTokenSecret", "APIServerEndpoint", "NodeGroup")
HOSTNAME_FIELDS = ("ClusterName", "NodeGroup", "RandString8")

#: keys of a pool section (in-tree), plus our group-bound extensions
POOL_KEYS = (
    "cluster-name",
    "project-id",
    "api-server-endpoint",
    "region",
    "plan",
    "os",
    "ssh-key-ids",
    "cloudinit",
    "hostname-pattern",
    "os-partition-size",
    "gpu-count",
    "gpu-type",
)
BOUND_KEYS = ("min-size", "max-size")
_MULTI = frozenset({"ssh-key-ids"})
#: in-tree pool name rule (cherry_cloud_provider.go), at most 63 characters
_POOL_NAME_RE = re.compile(r"^[a-z0-9A-Z]+[a-z0-9A-Z\-._]*[a-z0-9A-Z]+$|^[a-z0-9A-Z]$")
_TOP_KEYS = ClientTuning.KEYS | {
    "api-url",
    "cluster-name",
    "global",
    "pools",
    "controller-node-label",
    "reserved",
    "emulator",
}
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): a server stays
#: `deploying` this long. Cherry Servers publishes no deploy time ("bare metal takes minutes, VPS
#: less; no published figure", research notes); 300 s is this project's assumption for bare metal,
#: stated in every report that uses it. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {"deploy-seconds": 300.0}
_EMULATOR_KEYS = frozenset({"deploy-seconds", "stock", "rate-limit", "terminate-seconds"})


@dataclass(frozen=True)
class PoolSpec:
    """Everything needed to create one server of a pool."""

    name: str
    cluster_name: str
    project_id: int
    api_server_endpoint: str
    region: str
    plan: str
    os: str
    ssh_key_ids: tuple[int, ...] = ()
    cloudinit: GoTemplate | None = None
    hostname_pattern: GoTemplate | None = None
    os_partition_size: int = 0
    #: GPUs per server of this pool, from the config: Cherry's plan specs carry no GPU entry (cherrygo's
    #: Specs and the API's plan schema list cpus, memory, storage, raid, nics, bandwidth only)
    gpu_count: int = 0
    #: the GPU type the template's GPU label carries (default: the plan's slug)
    gpu_type: str = ""


@dataclass(frozen=True)
class EmulatorOptions:
    """How `--emulate` seeds the emulated cloud (see providers/cherry/emulator.py)."""

    deploy_seconds: float = 5.0
    terminate_seconds: float = 0.0
    rate_limit: float | None = None
    #: plan (slug or id) -> region -> quantity; "*" keys apply to every plan/region
    stock: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: {"*": {"*": 100}})


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


# ---------------------------------------------------------------- raw values with their key names


@dataclass
class _Raw:
    """One pool's raw settings: key -> (values, the name to show in errors)."""

    values: dict[str, tuple[list[str], str]] = field(default_factory=dict)

    def set(self, key: str, values: list[str], where: str) -> None:
        self.values[key] = (values, where)

    def get(self, key: str) -> tuple[list[str], str] | None:
        return self.values.get(key)


def _yaml_values(value: Any, where: str) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if isinstance(value, bool) or value is None:
        raise ConfigError(where, f"expected a string or number, got {value!r}")
    return [str(value)]


def _read_cloud_config(path: Path) -> tuple[_Raw | None, _Raw | None, dict[str, _Raw]]:
    """(global, nodegroupdef "default", other pools) from the gcfg file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("cloud-config", f"cannot read {path}: {exc.strerror or exc}") from exc
    glob: _Raw | None = None
    default: _Raw | None = None
    pools: dict[str, _Raw] = {}
    for sec in parse_gcfg(text):
        if sec.name == "global" and sec.sub is None:
            raw = glob = glob or _Raw()
        elif sec.name == "nodegroupdef" and sec.sub is not None:
            raw = pools.setdefault(sec.sub, _Raw())
            if sec.sub == "default":
                default = raw
        else:
            raise ConfigError(
                f"cloud-config {sec.label()}",
                'unknown section (expected [global] or [nodegroupdef "<pool>"])',
            )
        for key, values in sec.values.items():
            where = f"cloud-config {sec.label()} {key}"
            if key not in POOL_KEYS and key not in BOUND_KEYS:
                raise unknown_key(where, key, {*POOL_KEYS, *BOUND_KEYS}, note=f" (line {sec.lines[key]})")
            raw.set(key, values, where)
    pools.pop("default", None)
    return glob, default, pools


def _merge_yaml_pool(target: _Raw, section: Any, where: str) -> None:
    if not isinstance(section, Mapping):
        raise ConfigError(where, "expected a mapping of pool settings")
    for k, v in section.items():
        key = norm_key(k)
        w = f"{where}.{key}"
        if key not in POOL_KEYS and key not in BOUND_KEYS:
            raise unknown_key(w, key, {*POOL_KEYS, *BOUND_KEYS})
        target.set(key, _yaml_values(v, w), w)


# ---------------------------------------------------------------- typed values


def _one(raw: _Raw, key: str) -> tuple[str, str] | None:
    got = raw.get(key)
    if got is None:
        return None
    values, where = got
    if key not in _MULTI and len(values) > 1:
        return values[-1], where  # gcfg: a repeated single-valued variable keeps the last value
    return (values[-1] if values else ""), where


def _int(raw: _Raw, key: str, default: int, *, minimum: int = 0) -> int:
    got = _one(raw, key)
    if got is None or got[0].strip() == "":
        return default
    value, where = got
    try:
        n = int(value.strip(), 10)
    except ValueError:
        raise ConfigError(where, f"{value!r} is not an integer") from None
    if n < minimum:
        raise ConfigError(where, f"must be at least {minimum}, got {n}")
    return n


def _str(raw: _Raw, key: str) -> str:
    got = _one(raw, key)
    return got[0].strip() if got else ""


def _where(raw: _Raw, key: str, fallback: str) -> str:
    got = raw.get(key)
    return got[1] if got else fallback


def _decode_cloudinit(value: str, where: str) -> str:
    # Go's base64.StdEncoding (in-tree) requires padding and ignores CR/LF; so do we.
    compact = value.replace("\r", "").replace("\n", "").strip()
    try:
        data = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(where, "is not valid base64 (standard alphabet, padded)") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(where, "decodes to bytes that are not UTF-8 text") from None


def _template(source: str, allowed: tuple[str, ...], where: str) -> GoTemplate:
    try:
        return GoTemplate.parse(source, allowed)
    except TemplateError as exc:
        raise ConfigError(where, str(exc)) from None


def _api_url(value: str, where: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where, f"{value!r} is not an http(s) URL")
    return value if value.endswith("/") else value + "/"


def _stock(value: Any, where: str) -> dict[str, dict[str, int]]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"*": {"*": value}}
    if not isinstance(value, Mapping):
        raise ConfigError(where, "expected a number or {plan: {region: quantity}}")
    out: dict[str, dict[str, int]] = {}
    for plan, regions in value.items():
        if isinstance(regions, int) and not isinstance(regions, bool):
            out[str(plan)] = {"*": regions}
            continue
        if not isinstance(regions, Mapping):
            raise ConfigError(f"{where}.{plan}", "expected a number or {region: quantity}")
        for region, qty in regions.items():
            if not isinstance(qty, int) or isinstance(qty, bool) or qty < 0:
                raise ConfigError(f"{where}.{plan}.{region}", f"expected a non-negative integer, got {qty!r}")
            out.setdefault(str(plan), {})[str(region)] = qty
    return out


# ---------------------------------------------------------------- assembly


def load_config(ctx: ProviderContext) -> CherryConfig:
    """Validate every input and build the configuration; raise ConfigError naming the problem (the
    missing node groups, pool definition and token all at once)."""
    options = dict(ctx.options or {})
    opts = {norm_key(k): v for k, v in options.items()}
    for key in opts:
        if key not in _TOP_KEYS:
            raise ConfigError(f"cherry.{key}", f"unknown option (known: {', '.join(sorted(_TOP_KEYS))})")
    env = ctx.env

    manager = env.get("CHERRY_MANAGER", "")
    if manager not in ("", "rest"):
        raise ConfigError("CHERRY_MANAGER", f"{manager!r} is not supported (only 'rest')")

    glob, default, file_pools = (
        (None, None, {}) if ctx.cloud_config is None else _read_cloud_config(ctx.cloud_config)
    )
    glob = glob or _Raw()
    if "global" in opts:
        _merge_yaml_pool(glob, opts["global"], "cherry.global")
    pools_opt = opts.get("pools") or {}
    if not isinstance(pools_opt, Mapping):
        raise ConfigError("cherry.pools", "expected a mapping of pool name to settings")
    for name, section in pools_opt.items():
        if str(name) == "default":
            default = default or _Raw()
            _merge_yaml_pool(default, section, "cherry.pools.default")
        else:
            _merge_yaml_pool(file_pools.setdefault(str(name), _Raw()), section, f"cherry.pools.{name}")
    base = default or glob
    cluster_flag = (ctx.cluster_name or "").strip() or str(opts.get("cluster-name") or "").strip()

    # groups: --nodes, then sections carrying min-size/max-size
    bounds: dict[str, tuple[int, int, str]] = {}
    for name, raw in file_pools.items():
        if raw.get("min-size") or raw.get("max-size"):
            if raw.get("max-size") is None:
                raise ConfigError(f'pool "{name}" max-size', "missing (min-size is set)")
            where = _where(raw, "max-size", f'pool "{name}" max-size')
            lo, hi = _int(raw, "min-size", 0), _int(raw, "max-size", 0)
            if lo > hi:
                raise ConfigError(where, f"min-size {lo} is above max-size {hi}")
            bounds[name] = (lo, hi, "config")
    for spec in ctx.nodes:
        bounds[spec.name] = (spec.min_size, spec.max_size, "--nodes")
    if ctx.emulate:
        # a demo that needs nothing else: `serve --provider cherry --emulate`
        base = _Raw(
            {**{k: ([v], f"--emulate default {k}") for k, v in EMULATE_DEFAULTS.items()}, **base.values}
        )
        cluster_flag = cluster_flag or EMULATE_CLUSTER
        if not bounds:
            bounds = {name: (lo, hi, "--emulate default") for name, lo, hi in EMULATE_POOLS}
    # the three inputs a first run is most likely to lack are checked together and reported at once
    problems: list[ConfigError] = []
    if not bounds:
        problems.append(
            ConfigError("nodes", "no node groups: give --nodes=MIN:MAX:POOL or pools with min-size/max-size")
        )
    if not any(
        k in base.values for k in ("cluster-name", "cloudinit", "region", "plan", "project-id")
    ) and not any(name in file_pools for name in bounds):
        where = "cloud-config" if ctx.cloud_config is not None else "--cloud-config"
        problems.append(
            ConfigError(
                where,
                'no [global] or [nodegroupdef "default"] pool definition (project-id, plan, region, ...): '
                "give the in-tree cloud-config file with --cloud-config, or a cherry: section in --config",
            )
        )
    # secrets: stripped (a Secret made with --from-file ends in a newline), header-safe, masked in logs
    token = ""
    try:
        token = ctx.secret(
            "CHERRY_AUTH_TOKEN",
            required=not ctx.emulate,
            default=EMULATOR_DEFAULT_TOKEN if ctx.emulate else "",
        )
    except ConfigError as exc:
        problems.append(exc)
    raise_all(problems)
    boot_id = ctx.secret("BOOTSTRAP_TOKEN_ID")
    boot_secret = ctx.secret("BOOTSTRAP_TOKEN_SECRET")

    pools: dict[str, PoolSpec] = {}
    groups: list[GroupConfig] = []
    for name, (lo, hi, origin) in sorted(bounds.items()):
        if len(name) > 63 or not _POOL_NAME_RE.match(name):
            raise ConfigError(
                f"nodes ({name})",
                "pool name must be 1-63 letters, digits, '-', '.', '_', starting and ending alphanumeric",
            )
        own = file_pools.get(name)
        merged = _Raw(dict(base.values))
        if own is not None:
            merged.values.update(own.values)
        label = f'pool "{name}"'
        pools[name] = _pool_spec(name, merged, label, cluster_flag, boot_id, boot_secret)
        groups.append(GroupConfig(id=name, min_size=lo, max_size=hi, debug=f"cherry pool {name} ({origin})"))

    controller = env.get("CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL", "") or str(
        opts.get("controller-node-label") or DEFAULT_CONTROLLER_LABEL
    )
    api_url = env.get("CHERRY_API_URL", "")
    api_where = "CHERRY_API_URL" if api_url else "cherry.api-url"
    api_url = api_url or str(opts.get("api-url") or DEFAULT_API_URL)

    reserved = read_reserved(opts.get("reserved"), "cherry.reserved")

    emu_opt = opts.get("emulator") or {}
    if not isinstance(emu_opt, Mapping):
        raise ConfigError("cherry.emulator", "expected a mapping")
    emu = {norm_key(k): v for k, v in emu_opt.items()}
    for k in emu:
        if k not in _EMULATOR_KEYS:
            raise ConfigError(
                f"cherry.emulator.{k}", f"unknown option (known: {', '.join(sorted(_EMULATOR_KEYS))})"
            )
    emulator = EmulatorOptions(
        deploy_seconds=read_float(emu.get("deploy-seconds", 5.0), "cherry.emulator.deploy-seconds"),
        terminate_seconds=read_float(emu.get("terminate-seconds", 0.0), "cherry.emulator.terminate-seconds"),
        rate_limit=(
            read_float(emu["rate-limit"], "cherry.emulator.rate-limit", allow_zero=False)
            if emu.get("rate-limit")
            else None
        ),
        stock=_stock(emu["stock"], "cherry.emulator.stock") if "stock" in emu else EmulatorOptions().stock,
    )
    return CherryConfig(
        pools=pools,
        groups=tuple(groups),
        api_url=_api_url(api_url, api_where),
        token=token,
        bootstrap_token_id=boot_id,
        bootstrap_token_secret=boot_secret,
        controller_label=controller,
        reserved=reserved,
        tuning=TUNING.read(opts, "cherry"),
        emulator=emulator,
    )


def _pool_spec(
    name: str, raw: _Raw, label: str, cluster_flag: str, boot_id: str, boot_secret: str
) -> PoolSpec:
    def where(key: str) -> str:
        return _where(raw, key, f"{label} {key}")

    cluster = _str(raw, "cluster-name") or cluster_flag
    if not cluster:
        raise ConfigError(where("cluster-name"), "missing: set cluster-name in the pool or --cluster-name")
    project_id = _int(raw, "project-id", 0)
    if project_id <= 0:
        raise ConfigError(where("project-id"), "missing: the Cherry Servers project id (a positive integer)")
    for key in ("plan", "region", "os"):
        if not _str(raw, key):
            raise ConfigError(where(key), "missing")
    ssh: list[int] = []
    got = raw.get("ssh-key-ids")
    if got is not None:
        values, w = got
        for i, v in enumerate(x for x in values if x.strip()):
            try:
                key_id = int(v.strip(), 10)
            except ValueError:
                raise ConfigError(
                    w, f"invalid ssh-key ID at position {i}: {v!r}; it must be an integer"
                ) from None
            if not -(2**31) <= key_id < 2**31:
                raise ConfigError(w, f"ssh-key ID {key_id} is out of range")
            ssh.append(key_id)
    endpoint = _str(raw, "api-server-endpoint")
    cloudinit = None
    ci = _one(raw, "cloudinit")
    if ci is not None and ci[0].strip():
        cloudinit = _template(_decode_cloudinit(ci[0], ci[1]), CLOUDINIT_FIELDS, ci[1])
        used = cloudinit.fields
        for fld, value, key in (
            ("BootstrapTokenID", boot_id, "BOOTSTRAP_TOKEN_ID"),
            ("BootstrapTokenSecret", boot_secret, "BOOTSTRAP_TOKEN_SECRET"),
            ("APIServerEndpoint", endpoint, where("api-server-endpoint")),
        ):
            if fld in used and not value:
                raise ConfigError(key, f"is empty but the cloudinit of pool {name!r} uses {{{{.{fld}}}}}")
    hostname = None
    hp = _one(raw, "hostname-pattern")
    if hp is not None and hp[0].strip():
        hostname = _template(hp[0].strip(), HOSTNAME_FIELDS, hp[1])
    return PoolSpec(
        name=name,
        cluster_name=cluster,
        project_id=project_id,
        api_server_endpoint=endpoint,
        region=_str(raw, "region"),
        plan=_str(raw, "plan"),
        os=_str(raw, "os"),
        ssh_key_ids=tuple(ssh),
        cloudinit=cloudinit,
        hostname_pattern=hostname,
        os_partition_size=_int(raw, "os-partition-size", 0),
        gpu_count=_int(raw, "gpu-count", 0),
        gpu_type=_str(raw, "gpu-type"),
    )
