"""Pool settings as written: the in-tree gcfg cloud-config file and the YAML `global:`/`pools:`
sections, read into raw sections whose every value remembers where it was given (the name an
error shows: `cloud-config [nodegroupdef "pool1"] plan`, `cherry.pools.pool1.plan`).

Values stay text here, as gcfg gives them (a key may repeat: `ssh-key-ids`); config.py merges the
sections of a pool and validates the result as a `PoolSpec`. The keys a section may hold are the
caller's (PoolSpec's keys and the group bounds), so an unknown one is refused where it is written.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.errors import ConfigError, unknown_key
from cloudprovider_grpc.formats.gcfg import parse_gcfg
from cloudprovider_grpc.providers.options import norm_key, read_int

#: our group-bound extensions of a pool section
BOUND_KEYS = ("min-size", "max-size")
#: the multi-valued key (every value counts; the others keep their last value, as gcfg does)
MULTI_KEYS = frozenset({"ssh-key-ids"})


@dataclass
class RawSection:
    """One pool's raw settings: key -> (values, the name to show in errors)."""

    values: dict[str, tuple[list[str], str]] = field(default_factory=dict)

    def set(self, key: str, values: list[str], where: str) -> None:
        self.values[key] = (values, where)

    def get(self, key: str) -> tuple[list[str], str] | None:
        return self.values.get(key)

    def where(self, key: str, fallback: str) -> str:
        got = self.get(key)
        return got[1] if got else fallback

    def bound(self, key: str) -> int:
        """min-size / max-size: a whole number of at least 0 (blank: 0)."""
        got = self.get(key)
        if got is None or not got[0] or got[0][-1].strip() == "":
            return 0
        return read_int(got[0][-1], got[1])

    def pool_input(self, name: str) -> tuple[dict[str, Any], dict[str, str]]:
        """PoolSpec's input for pool `name` (the bounds left out) and where each value was given."""
        given: dict[str, Any] = {"name": name}
        where: dict[str, str] = {}
        for key, (values, source) in self.values.items():
            if key not in BOUND_KEYS:
                given[key] = values if key in MULTI_KEYS else (values[-1] if values else "")
                where[key] = source
        return given, where


def _yaml_values(value: Any, where: str) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if isinstance(value, bool) or value is None:
        raise ConfigError(where, f"expected a string or number, got {value!r}")
    return [str(value)]


def read_cloud_config(
    path: Path, known: Collection[str]
) -> tuple[RawSection | None, RawSection | None, dict[str, RawSection]]:
    """(global, nodegroupdef "default", other pools) from the gcfg file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("cloud-config", f"cannot read {path}: {exc.strerror or exc}") from exc
    glob: RawSection | None = None
    default: RawSection | None = None
    pools: dict[str, RawSection] = {}
    for sec in parse_gcfg(text):
        if sec.name == "global" and sec.sub is None:
            raw = glob = glob or RawSection()
        elif sec.name == "nodegroupdef" and sec.sub is not None:
            raw = pools.setdefault(sec.sub, RawSection())
            if sec.sub == "default":
                default = raw
        else:
            raise ConfigError(
                f"cloud-config {sec.label()}",
                'unknown section (expected [global] or [nodegroupdef "<pool>"])',
            )
        for key, values in sec.values.items():
            where = f"cloud-config {sec.label()} {key}"
            if key not in known:
                raise unknown_key(where, key, known, note=f" (line {sec.lines[key]})")
            raw.set(key, values, where)
    pools.pop("default", None)
    return glob, default, pools


def merge_yaml_pool(target: RawSection, section: Any, where: str, known: Collection[str]) -> None:
    """A YAML pool section's keys over `target`'s (the YAML wins over the file)."""
    if not isinstance(section, Mapping):
        raise ConfigError(where, "expected a mapping of pool settings")
    for k, v in section.items():
        key = norm_key(k)
        w = f"{where}.{key}"
        if key not in known:
            raise unknown_key(w, key, known)
        target.set(key, _yaml_values(v, w), w)
