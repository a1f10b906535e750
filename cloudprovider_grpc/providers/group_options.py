"""Per-group autoscaling options from the configuration file, for every backend alike.

The YAML key `group_options` maps a node group, named by its id or by the cloud's name for it (the
way a `--nodes MIN:MAX:NAME` spec names one), to `AutoscalingOptions` field names and their values:

    group_options:
      gpu-pool: {max_node_startup_time: 20m, scale_down_unneeded_time: 300}

Why one mechanism here and not a key per cloud: groups are discovered from each cloud's own listing,
and every listing's groups pass through the shared machinery (`GroupCore.sync_groups`), so applying
the options there gives each backend the same options, in the same words, with nothing to write in
a cloud package; the read side (`ReadSide.options`), the state version and the compiled front's cache
all read the group's `GroupConfig.options`, which is where they land. A backend's own per-group
options (the sim cloud's `groups[].options`) stay; the keys given here win over them, key by key.

Values are validated at startup, every problem at once (`ConfigError` naming
`group_options.<group>.<option>`): durations in seconds or Go durations ("20m", "1m30s") as CA's
flags take them, thresholds between 0 and 1, the two switches as true or false. A group named here
that no listing offers cannot be known before the cloud is listed: `check-config` names it (exit 1)
and `serve` warns once each time the set of such names changes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.durations import parse_duration
from cloudprovider_grpc.core.errors import ConfigError, raise_all, unknown_key
from cloudprovider_grpc.providers.contract import AutoscalingOptions
from cloudprovider_grpc.providers.driver import GroupConfig

KEY = "group_options"

#: the option names a group may set, with the kind of value each takes (the contract's fields)
_KINDS: dict[str, str] = {
    f.name: (
        "switch" if f.type in (bool, "bool") else "ratio" if f.name.endswith("_threshold") else "duration"
    )
    for f in dataclasses.fields(AutoscalingOptions)
}

#: the longest duration the legacy nanosecond fields (int64) can carry, which CA up to 1.34 reads
_MAX_SECONDS = (2**63 - 1) // 10**9


@dataclass(frozen=True)
class GroupOptions:
    """The validated `group_options` section: group id or name -> option name -> value."""

    by_ref: Mapping[str, Mapping[str, float | bool]] = field(default_factory=dict)

    @classmethod
    def read(cls, section: Any, where: str = KEY) -> GroupOptions:
        """The section validated; raises every problem at once, each naming its key."""
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise ConfigError(where, "expected a mapping of node group id or name to its options")
        problems: list[ConfigError] = []
        out: dict[str, dict[str, float | bool]] = {}
        for ref, options in section.items():
            name = str(ref).strip()
            at = f"{where}.{ref}"
            if not name:
                problems.append(ConfigError(at, "a node group id or name must not be empty"))
                continue
            if not isinstance(options, Mapping):
                problems.append(ConfigError(at, "expected a mapping of option names to values"))
                continue
            values: dict[str, float | bool] = {}
            for key, value in options.items():
                option = str(key).strip().lower().replace("-", "_")
                if option in values:
                    problems.append(ConfigError(f"{at}.{key}", f"{option} is given twice"))
                    continue
                try:
                    values[option] = _value(option, value, f"{at}.{key}")
                except ConfigError as exc:
                    problems.append(exc)
            out[name] = values
        raise_all(problems)
        return cls(out)

    def __bool__(self) -> bool:
        return bool(self.by_ref)

    def applied(self, config: GroupConfig) -> GroupConfig:
        """`config` with the options named for it: those given by the group's name, then by its id
        (an id is the more precise name, so its keys win), both over the backend's own."""
        found = [self.by_ref.get(ref) for ref in (config.name, config.id) if ref]
        given = [options for options in found if options]
        if not given:
            return config
        merged = dict(config.options)
        for options in given:
            merged.update(options)
        return dataclasses.replace(config, options=merged)

    def unmatched(self, configs: Iterable[GroupConfig]) -> list[str]:
        """The group ids or names configured here that none of `configs` has."""
        known = {ref for c in configs for ref in (c.id, c.name) if ref}
        return sorted(ref for ref in self.by_ref if ref not in known)


def _value(option: str, value: Any, where: str) -> float | bool:
    kind = _KINDS.get(option)
    if kind is None:
        raise unknown_key(where, option, _KINDS, what="option")
    if kind == "switch":
        if not isinstance(value, bool):
            raise ConfigError(where, f"{value!r} is not true or false")
        return value
    if isinstance(value, bool):
        raise ConfigError(where, f"{value!r} is not a number")
    if kind == "ratio":
        try:
            ratio = float(value)
        except (TypeError, ValueError):
            raise ConfigError(where, f"{value!r} is not a number between 0 and 1") from None
        if not 0.0 <= ratio <= 1.0:  # also NaN
            raise ConfigError(where, f"must be between 0 and 1, got {ratio:g}")
        return ratio
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ConfigError(where, str(exc)) from None
    if not math.isfinite(seconds) or not 0 <= seconds <= _MAX_SECONDS:
        raise ConfigError(where, f"must be between 0 and {_MAX_SECONDS} seconds, got {seconds:g}")
    return seconds
