"""Secrets (API tokens, bootstrap tokens, keys): read once, cleaned, checked, and kept out of every
log line, status message and metric.

Every backend reads its secrets through `read_secret` (or `ProviderContext.secret`, which calls it):
- surrounding whitespace is stripped, whatever the source: `kubectl create secret --from-file`
  leaves the file's trailing newline in the environment variable or the mounted file;
- a value that cannot travel in an HTTP header (control characters, non-ASCII) is a configuration
  error naming the variable, at startup and in `check-config`, never a request that fails later
  with the header (and the secret) in the exception text;
- the value is registered here, and `redact()` replaces every registered value in a text. The log
  formatter, the process's last-resort exception hooks, gRPC status messages and the /metrics page
  pass through it, so no exception text can carry a registered secret out of the process.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

from cloudprovider_grpc.core.errors import ConfigError

__all__ = ["MASK", "read_secret", "redact", "register", "register_environment", "registered"]

MASK = "***"
#: shorter values are not registered: masking "abc" in every log line would make logs unreadable
#: and hides nothing (no real token is that short)
MIN_REGISTERED = 6
#: RFC 9110 field-value characters, less tab (no token contains one): printable ASCII and space
_HEADER_SAFE = re.compile(r"^[\x20-\x7e]+$")

#: environment variable names that hold secrets by convention, masked before any backend reads them
_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)(_|$)"
)

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
_pattern: re.Pattern[str] | None = None


def register(value: str) -> None:
    """Mask `value` (and its stripped form) in everything `redact` sees from now on."""
    global _secrets, _pattern
    candidates = {v for v in (value, value.strip()) if len(v) >= MIN_REGISTERED}
    if not candidates:
        return
    with _lock:
        if candidates <= _secrets:
            return
        _secrets = _secrets | candidates
        # longest first, so a secret that contains another is masked whole
        alternatives = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in alternatives))


def registered() -> frozenset[str]:
    return _secrets


def redact(text: str) -> str:
    """`text` with every registered secret replaced by ***."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(MASK, text)


def read_secret(env: Mapping[str, str], name: str, *, required: bool = False, default: str = "") -> str:
    """The secret in `env[name]`, stripped, header-safe and registered for redaction.

    An unset or blank variable gives `default` (or a ConfigError when `required`). The error messages
    name the variable and never contain the value."""
    raw = env.get(name)
    if raw is not None:
        register(raw)  # masked even when rejected below: the raw form may still be in some text
    value = (raw or "").strip()
    if not value:
        if required:
            raise ConfigError(name, "is required and missing" if raw is None else "is empty")
        return default
    if not _HEADER_SAFE.match(value):
        bad = sorted({f"U+{ord(c):04X}" for c in value if not "\x20" <= c <= "\x7e"})
        what = ", ".join(bad[:3])
        raise ConfigError(
            name,
            f"contains characters that cannot be sent in an HTTP header ({what}); "
            "check the Secret for stray characters (the value is not shown)",
        )
    register(value)
    return value


def register_environment(env: Mapping[str, str]) -> None:
    """Mask the values of every variable whose name says it holds a secret (`*_TOKEN`, `*_SECRET`,
    `*_API_KEY`, ...), before any configuration is read, so even a crash at startup cannot print one."""
    for name, value in env.items():
        if _SECRET_NAME.search(name.upper()):
            register(value)
