"""Readers for a backend's own configuration section, shared by every cloud package.

Each backend validates its YAML section (and environment) at build time and reports the first
problem as one `ConfigError(key, problem)` line. The value readers and the HTTP client tuning every
cloud client takes (timeouts, retries, retry budget, rate limit, catalogue TTL) are the same for
every cloud, so they live here once; a backend keeps only what is its own (credentials, groups,
endpoints, emulator knobs) and its defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from cloudprovider_grpc.core.errors import ConfigError, unknown_key

#: a Kubernetes quantity ("100m", "512Mi", "1"), for `reserved` resources
_QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[kMGTPE]i?|[munk])?$")


def norm_key(key: object) -> str:
    """Option keys are accepted with dashes or underscores, in any case: `read-timeout`."""
    return str(key).strip().lower().replace("_", "-")


def read_float(value: Any, where: str, *, allow_zero: bool = True) -> float:
    """A non-negative number (positive with allow_zero=False)."""
    if isinstance(value, bool):
        raise ConfigError(where, f"{value!r} is not a number")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(where, f"{value!r} is not a number") from None
    if f != f or f < 0 or (not allow_zero and f == 0):  # f != f: NaN
        raise ConfigError(where, f"must be {'at least 0' if allow_zero else 'above 0'}, got {f:g}")
    return f


def read_int(value: Any, where: str, *, minimum: int = 0) -> int:
    """A whole number of at least `minimum` (YAML ints, or digit strings from the environment)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(where, f"expected an integer, got {value!r}")
    try:
        n = int(str(value).strip(), 10)
    except ValueError:
        raise ConfigError(where, f"{value!r} is not an integer") from None
    if n < minimum:
        raise ConfigError(where, f"must be at least {minimum}, got {n}")
    return n


def read_url(value: Any, where: str) -> str:
    """An http(s) base URL without query or fragment, with a trailing slash."""
    text = str(value or "").strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where, f"{text!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise ConfigError(where, "must not carry a query or fragment")
    return text if text.endswith("/") else text + "/"


def read_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(where, "expected a mapping")
    return value


def check_known(section: Mapping[str, Any], where: str, known: set[str] | frozenset[str]) -> None:
    """Unknown keys are errors, not silently ignored (a typo must not fall back to a default)."""
    for key in section:
        if norm_key(key) not in known:
            raise unknown_key(f"{where}.{key}", norm_key(key), known, what="option")


def read_reserved(value: Any, where: str) -> dict[str, str]:
    """`reserved`: resource name -> Kubernetes quantity taken from each node's allocatable."""
    out: dict[str, str] = {}
    for k, v in read_mapping(value, where).items():
        if not _QUANTITY_RE.match(str(v).strip()):
            raise ConfigError(f"{where}.{k}", f"{v!r} is not a Kubernetes quantity")
        out[str(k)] = str(v).strip()
    return out


@dataclass(frozen=True)
class ClientTuning:
    """How a backend's HTTP client behaves (see http/client.py). `retry_budget` is the most seconds
    one API call may spend retrying: a Refresh lists synchronously under CA's RPC deadline."""

    connect_timeout: float = 3.05
    read_timeout: float = 10.0
    retries: int = 4
    retry_budget: float = 8.0
    rate_limit: float | None = 10.0  # requests per second; None: no client-side limit
    catalog_ttl: float = 3600.0

    #: the option keys, as users write them
    KEYS: ClassVar[frozenset[str]] = frozenset(
        {"connect-timeout", "read-timeout", "retries", "retry-budget", "rate-limit", "catalog-ttl"}
    )

    def client_kwargs(self) -> dict[str, Any]:
        """What the cloud clients (on http/client.py) take."""
        return {
            "timeout": (self.connect_timeout, self.read_timeout),
            "retries": self.retries,
            "rate_limit_per_s": self.rate_limit,
            "max_elapsed": self.retry_budget,
        }

    def read(self, opts: Mapping[str, Any], section: str) -> ClientTuning:
        """These defaults overridden by the section's keys (any spelling `norm_key` accepts)."""
        given = {norm_key(k): v for k, v in opts.items()}

        def pick(key: str, default: Any) -> Any:
            return given.get(key, default)

        return ClientTuning(
            connect_timeout=read_float(
                pick("connect-timeout", self.connect_timeout), f"{section}.connect-timeout", allow_zero=False
            ),
            read_timeout=read_float(
                pick("read-timeout", self.read_timeout), f"{section}.read-timeout", allow_zero=False
            ),
            retries=read_int(pick("retries", self.retries), f"{section}.retries"),
            retry_budget=read_float(
                pick("retry-budget", self.retry_budget), f"{section}.retry-budget", allow_zero=False
            ),
            rate_limit=(
                None
                if (rate := pick("rate-limit", self.rate_limit)) is None
                else read_float(rate, f"{section}.rate-limit", allow_zero=False)
            ),
            catalog_ttl=read_float(pick("catalog-ttl", self.catalog_ttl), f"{section}.catalog-ttl"),
        )
