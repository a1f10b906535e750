"""StackPointCloud configuration: the fork's inputs, read verbatim, plus our documented options.

In-tree (fork) facts (StackPointCloud/autoscaler `stackpointio-1.1.0.c`, `spc_manager.go` and
`deploy-spc/cluster-autoscaler-deployment.yml.j2`; research note cherry-spc.md §B1):

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

Every problem is reported at build time as `ConfigError(key, problem)`; nothing here does I/O
beyond reading the configured files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cloudprovider_grpc.core.errors import ConfigError, raise_all, unknown_key
from cloudprovider_grpc.formats.gotemplate import GoTemplate, TemplateError
from cloudprovider_grpc.formats.spc_machine_specs import spec_of
from cloudprovider_grpc.providers.options import ClientTuning, norm_key, read_float, read_reserved
from cloudprovider_grpc.providers.registry import ProviderContext
from cloudprovider_grpc.providers.spc.providerid import parse_template

#: the public API of the SPC era (stackpoint-api-docs `_basics.md`)
DEFAULT_API_URL = "https://api.stackpoint.io/"
#: with --emulate and no CLUSTER_API_TOKEN, the emulator accepts this one
EMULATOR_DEFAULT_TOKEN = "spc-emulator-token"
#: the emulated demo cluster's ids when ORGANIZATION_ID / CLUSTER_ID are not given
EMULATOR_DEFAULT_ORG = 1
EMULATOR_DEFAULT_CLUSTER = 1
#: gen 1 group id prefix, also the `group_name` SPC gives nodes of an autoscaled pool
GROUP_PREFIX = "autoscaling-"
#: gen 1's id when `--nodes` gives none
GEN1_DEFAULT_ID = "default"

_TOP_KEYS = frozenset(
    {
        "api-url",
        "organization-id",
        "cluster-id",
        "node-pools-file",
        "draft-timeout",
        "provider-id-template",
        "reserved",
        *ClientTuning.KEYS,
        "emulator",
    }
)
#: the emulator's timers in a simulation (virtual time; `simulate --emulate`): `draft` ->
#: `building` -> `provisioned` -> `running`. SPC documents no per-state times; the fork's logs show a
#: one-node scale-up at 21:03 and the group full at 21:18 (research notes, gen 2), so a node takes
#: minutes; 60 + 420 + 120 s (10 minutes) is this project's reading of it, under CA's 15-minute
#: max-node-provision-time. A scenario's `cloud: {emulator: {...}}` overrides it.
SIMULATED_TIMINGS: dict[str, float] = {
    "draft-seconds": 60.0,
    "building-seconds": 420.0,
    "provisioned-seconds": 120.0,
    "deleting-seconds": 60.0,
}
_EMULATOR_KEYS = frozenset(
    {
        "draft-seconds",
        "building-seconds",
        "provisioned-seconds",
        "deleting-seconds",
        "pool-cpu-memory",
        "rate-limit",
        "pools",
    }
)
_EMULATOR_POOL_KEYS = frozenset(
    {
        "name",
        "instance-size",
        "min-count",
        "max-count",
        "running",
        "autoscaled",
        "labels",
        "gpu-instance-size",
        "gpu-core-count",
        "capacity",
    }
)
#: RFC 9110 field-value characters: visible ASCII and spaces inside, no CR/LF/controls
_HEADER_SAFE_RE = re.compile(r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


#: HTTP client defaults; SPC documented no rate limit, so ours only keeps a burst of deletes polite.
#: The catalogue (machine table, pool templates) is rebuilt from the pool listing every 5 minutes.
TUNING = ClientTuning(read_timeout=10.0, retries=4, rate_limit=10.0, catalog_ttl=300.0)


@dataclass(frozen=True)
class Gen1Group:
    """A gen 1 `--nodes=<min>:<max>:<size>[:<id>]` group: id `autoscaling-<id>`."""

    min_size: int
    max_size: int
    size: str
    pool_id: str

    @property
    def group_id(self) -> str:
        return GROUP_PREFIX + self.pool_id


@dataclass(frozen=True)
class EmulatorPool:
    """One node pool of the emulated cluster (`spc.emulator.pools`)."""

    name: str
    instance_size: str
    min_count: int = 0
    max_count: int = 0
    running: int = 0
    autoscaled: bool = True
    labels: str = ""
    gpu_instance_size: str = ""
    gpu_core_count: int | None = None
    #: most nodes the emulated provider can build for this pool (None: unlimited; 0: a stockout)
    capacity: int | None = None


@dataclass(frozen=True)
class EmulatorOptions:
    """How `--emulate` runs the emulated SPC API (providers/spc/emulator.py). Seconds per state;
    the fork's logs show minutes in reality (a 1-node scale-up took about 15 min, §B5)."""

    draft_seconds: float = 2.0
    building_seconds: float = 3.0
    provisioned_seconds: float = 2.0
    deleting_seconds: float = 3.0
    #: include `cpu`/`memory` in pool JSON (the documented pool JSON has neither, §B2)
    pool_cpu_memory: bool = False
    rate_limit: float | None = None
    #: the emulated cluster's pools; empty: the demo cluster's two autoscaled AWS pools
    pools: tuple[EmulatorPool, ...] = ()


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


def _positive_int(value: str, where: str) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) <= 0:
        raise ConfigError(where, f"{value!r} is not a positive integer")
    return int(text)


def _api_url(value: str, where: str) -> str:
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where, f"{value!r} is not an http(s) URL")
    # the fork trims a trailing "/" and appends "/orgs/..."; we keep the path as a directory
    return value.rstrip("/") + "/"


def header_safe_secret(value: str, where: str) -> str:
    """The secret without surrounding whitespace (a mounted Secret often ends with a newline);
    refuse one that cannot travel in an HTTP header. The message never quotes the value."""
    value = value.strip()
    if value and not _HEADER_SAFE_RE.match(value):
        raise ConfigError(where, "contains characters that cannot be sent in an HTTP header")
    return value


def read_pools_file(path: Path, where: str) -> tuple[Mapping[str, Any], ...]:
    """The `stackpoint-node-pools` override: a JSON array of node-pool objects with API field names."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(where, f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(where, f"{path} is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError(where, f"{path} must hold a JSON array of node-pool objects")
    for i, pool in enumerate(data):
        if not isinstance(pool, dict):
            raise ConfigError(where, f"{path}: item {i} is not an object")
        for key in ("pk", "instance_id"):
            if key not in pool:
                raise ConfigError(where, f"{path}: item {i} has no {key!r}")
        if pool.get("autoscaled"):
            lo, hi = pool.get("min_count"), pool.get("max_count")
            if (
                not isinstance(lo, int)
                or not isinstance(hi, int)
                or isinstance(lo, bool)
                or lo < 0
                or lo > hi
            ):
                raise ConfigError(
                    where, f"{path}: pool {pool['instance_id']!r} needs 0 <= min_count <= max_count"
                )
    return tuple(data)


def _emulator_pools(value: Any, where: str) -> tuple[EmulatorPool, ...]:
    if not isinstance(value, list):
        raise ConfigError(
            where, "expected a list of pools ({name, instance-size, min-count, max-count, running})"
        )
    out: list[EmulatorPool] = []
    for i, item in enumerate(value):
        w = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(w, "expected a mapping")
        pool = {norm_key(k): v for k, v in item.items()}
        for k in pool:
            if k not in _EMULATOR_POOL_KEYS:
                raise ConfigError(
                    f"{w}.{k}", f"unknown key (known: {', '.join(sorted(_EMULATOR_POOL_KEYS))})"
                )
        size = str(pool.get("instance-size") or "").strip()
        if not size:
            raise ConfigError(f"{w}.instance-size", "missing")
        counts: dict[str, int] = {}
        for k in ("min-count", "max-count", "running"):
            v = pool.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"{w}.{k}", f"expected a non-negative integer, got {v!r}")
            counts[k] = v
        if counts["min-count"] > counts["max-count"]:
            raise ConfigError(
                f"{w}.min-count", f"{counts['min-count']} is above max-count {counts['max-count']}"
            )
        capacity = pool.get("capacity")
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0
        ):
            raise ConfigError(f"{w}.capacity", f"expected a non-negative integer, got {capacity!r}")
        gpus = pool.get("gpu-core-count")
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
            raise ConfigError(f"{w}.gpu-core-count", f"expected a non-negative integer, got {gpus!r}")
        out.append(
            EmulatorPool(
                name=str(pool.get("name") or f"Pool {i + 1}"),
                instance_size=size,
                min_count=counts["min-count"],
                max_count=counts["max-count"],
                running=counts["running"],
                autoscaled=bool(pool.get("autoscaled", True)),
                labels=str(pool.get("labels") or ""),
                gpu_instance_size=str(pool.get("gpu-instance-size") or ""),
                gpu_core_count=gpus,
                capacity=capacity,
            )
        )
    return tuple(out)


def _nodes(ctx: ProviderContext) -> tuple[tuple[Gen1Group, ...], tuple[tuple[int, int, str], ...]]:
    gen1: dict[str, Gen1Group] = {}
    narrow: list[tuple[int, int, str]] = []
    for spec in ctx.nodes:
        size, sep, pool_id = spec.name.partition(":")
        if sep or spec_of(size) is not None:
            pool_id = pool_id or GEN1_DEFAULT_ID
            where = f"nodes ({spec.min_size}:{spec.max_size}:{spec.name})"
            if ":" in pool_id or not _ID_RE.match(pool_id):
                raise ConfigError(where, f"{pool_id!r} is not a node-group id (<min>:<max>:<size>[:<id>])")
            if not size:
                raise ConfigError(where, "the instance size is empty (<min>:<max>:<size>[:<id>])")
            group = Gen1Group(spec.min_size, spec.max_size, size, pool_id)
            if group.group_id in gen1:
                raise ConfigError(where, f"node group {group.group_id!r} is given twice")
            gen1[group.group_id] = group
        else:
            narrow.append((spec.min_size, spec.max_size, spec.name))
    return tuple(gen1.values()), tuple(narrow)


def load_config(ctx: ProviderContext) -> SpcConfig:
    """Validate every input and build the configuration; raise ConfigError on the first problem."""
    opts = {norm_key(k): v for k, v in dict(ctx.options or {}).items()}
    for key in opts:
        if key not in _TOP_KEYS:
            raise unknown_key(f"spc.{key}", key, _TOP_KEYS, what="option")
    env = ctx.env

    # the required inputs are all checked before any is reported: a first run learns every missing
    # one at once, not one per attempt
    problems: list[ConfigError] = []
    token = header_safe_secret(env.get("CLUSTER_API_TOKEN", ""), "CLUSTER_API_TOKEN")
    if not token:
        if not ctx.emulate:
            problems.append(
                ConfigError(
                    "CLUSTER_API_TOKEN", "is required and missing (Secret stackpointio, key api-token)"
                )
            )
        token = EMULATOR_DEFAULT_TOKEN

    url_key = next((k for k in ("SPC_API_BASE_URL", "SPC_BASE_API_URL") if env.get(k, "").strip()), "")
    api_url = DEFAULT_API_URL  # with --emulate: replaced by the emulator's address
    try:
        if url_key:
            api_url = _api_url(env[url_key], url_key)
        elif opts.get("api-url"):
            api_url = _api_url(str(opts["api-url"]), "spc.api-url")
        elif not ctx.emulate:
            raise ConfigError(
                "SPC_API_BASE_URL", "is required and missing (Secret stackpointio, key api-url)"
            )
    except ConfigError as exc:
        problems.append(exc)

    ids: dict[str, int] = {}
    for env_key, opt_key, default in (
        ("ORGANIZATION_ID", "organization-id", EMULATOR_DEFAULT_ORG),
        ("CLUSTER_ID", "cluster-id", EMULATOR_DEFAULT_CLUSTER),
    ):
        raw = env.get(env_key, "").strip()
        try:
            if raw:
                ids[env_key] = _positive_int(raw, env_key)
            elif opts.get(opt_key) is not None:
                ids[env_key] = _positive_int(str(opts[opt_key]), f"spc.{opt_key}")
            elif ctx.emulate:
                ids[env_key] = default
            else:
                raise ConfigError(env_key, f"is required and missing (Secret stackpointio, key {opt_key})")
        except ConfigError as exc:
            problems.append(exc)
    raise_all(problems)

    pools_override = None
    pools_file, pools_where = env.get("SPC_NODE_POOLS_FILE", "").strip(), "SPC_NODE_POOLS_FILE"
    if not pools_file and opts.get("node-pools-file"):
        pools_file, pools_where = str(opts["node-pools-file"]), "spc.node-pools-file"
    if pools_file:
        path = Path(pools_file)
        # the fork used the ConfigMap only "if it exists"; a mounted optional ConfigMap may be absent
        if path.exists():
            pools_override = read_pools_file(path, pools_where)

    gen1, narrow = _nodes(ctx)

    template = None
    if opts.get("provider-id-template"):
        try:
            template = parse_template(str(opts["provider-id-template"]))
        except TemplateError as exc:
            raise ConfigError("spc.provider-id-template", str(exc)) from None

    reserved = read_reserved(opts.get("reserved"), "spc.reserved")

    emu_opt = opts.get("emulator") or {}
    if not isinstance(emu_opt, Mapping):
        raise ConfigError("spc.emulator", "expected a mapping")
    emu = {norm_key(k): v for k, v in emu_opt.items()}
    for k in emu:
        if k not in _EMULATOR_KEYS:
            raise ConfigError(
                f"spc.emulator.{k}", f"unknown option (known: {', '.join(sorted(_EMULATOR_KEYS))})"
            )
    defaults = EmulatorOptions()
    emulator = EmulatorOptions(
        draft_seconds=read_float(
            emu.get("draft-seconds", defaults.draft_seconds), "spc.emulator.draft-seconds"
        ),
        building_seconds=read_float(
            emu.get("building-seconds", defaults.building_seconds), "spc.emulator.building-seconds"
        ),
        provisioned_seconds=read_float(
            emu.get("provisioned-seconds", defaults.provisioned_seconds), "spc.emulator.provisioned-seconds"
        ),
        deleting_seconds=read_float(
            emu.get("deleting-seconds", defaults.deleting_seconds), "spc.emulator.deleting-seconds"
        ),
        pool_cpu_memory=bool(emu.get("pool-cpu-memory", False)),
        rate_limit=(
            read_float(emu["rate-limit"], "spc.emulator.rate-limit", allow_zero=False)
            if emu.get("rate-limit")
            else None
        ),
        pools=_emulator_pools(emu["pools"], "spc.emulator.pools") if "pools" in emu else (),
    )
    return SpcConfig(
        api_url=api_url,
        token=token,
        org_id=ids["ORGANIZATION_ID"],
        cluster_id=ids["CLUSTER_ID"],
        pools_override=pools_override,
        gen1=gen1,
        narrow=narrow,
        draft_timeout=read_float(opts.get("draft-timeout", 600.0), "spc.draft-timeout", allow_zero=False),
        provider_id_template=template,
        reserved=reserved,
        tuning=TUNING.read(opts, "spc"),
        emulator=emulator,
    )
