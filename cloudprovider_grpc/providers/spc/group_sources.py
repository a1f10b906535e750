"""What defines SPC's node groups besides the API's pool listing: the node-pools override file (the
fork's optional ConfigMap `stackpoint-node-pools`) and gen 1's `--nodes=<min>:<max>:<size>[:<id>]`.
Both are read as written; errors name the file's variable or key, and the `--nodes` value."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.formats.spc_machine_specs import spec_of
from cloudprovider_grpc.providers.registry import ProviderContext

#: gen 1 group id prefix, also the `group_name` SPC gives nodes of an autoscaled pool
GROUP_PREFIX = "autoscaling-"
#: gen 1's id when `--nodes` gives none
GEN1_DEFAULT_ID = "default"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


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


def read_nodes(ctx: ProviderContext) -> tuple[tuple[Gen1Group, ...], tuple[tuple[int, int, str], ...]]:
    """`--nodes`: gen 1 groups (the NAME is an instance size, maybe with an id), and the specs that
    narrow the discovered groups instead."""
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
