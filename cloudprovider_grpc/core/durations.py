"""Go durations ("15s", "1m30s", "500ms"), read by the one rule Go's `time.ParseDuration` applies,
because cluster-autoscaler's flags and client-go's leader election take their durations that way and
a setting written for CA must mean the same here.

The rule (Go's `time` package documentation for `ParseDuration`): an optional sign, then one or more
decimal numbers, each with an optional fraction and a unit suffix: "ns", "us" (or "µs"), "ms", "s",
"m", "h". A bare "0" is the only number allowed without a unit.
"""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Seconds from a duration in Go's syntax; ValueError for anything `time.ParseDuration` rejects."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body[1:] if body[:1] in "+-" else body
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _PART.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(f"{text!r} is not a duration (e.g. 15s, 1m30s, 500ms)")
    return sign * total


#: a plain decimal number written as text: seconds, as the same number in YAML is
_SECONDS_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")


def parse_duration(value: object) -> float:
    """Seconds from a Go duration string or from a number of seconds; a bool is neither.

    A number means seconds whether YAML gave it as a number or an environment variable gave it as
    text (`"15"`, `"0.2"`): the same setting must not change meaning with where it was written.
    Everything else is read by Go's rule. Negative values are returned as such: each caller says
    which range its setting takes."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration (e.g. 15s, 1m30s, 500ms)")
    if isinstance(value, int | float):
        if math.isnan(value):
            raise ValueError(f"{value!r} is not a duration (e.g. 15s, 1m30s, 500ms)")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration (e.g. 15s, 1m30s, 500ms)")
    if _SECONDS_TEXT.fullmatch(value.strip()):
        return float(value)
    return parse_go_duration(value)
