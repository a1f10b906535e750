"""When and how long to wait before trying an HTTP request again.

The rules follow what the clouds' own clients do (cherrygo internal/client/retry.go retries 408, 429,
502, 503, 504 for idempotent methods and honours Retry-After) with one deliberate difference: a POST
is retried only when the cloud certainly did not process it (429, or the connection was never
made). Anything else after a POST may have been sent leaves the outcome unknown, and the managed
layer resolves that by looking the creation token up, never by blind resending.
"""

from __future__ import annotations

import email.utils
import random
from dataclasses import dataclass
from datetime import UTC, datetime

#: methods the HTTP spec defines as idempotent (RFC 9110 §9.2.2)
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: statuses that mean "try again later" for an idempotent request
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` further attempts after the first; exponential backoff with full jitter
    (sleep = uniform(0, min(max_backoff, base * 2**attempt))); a server's Retry-After wins over the
    computed backoff but is capped at `max_retry_after` so a hostile or confused server cannot stall
    a Refresh for minutes."""

    retries: int = 4
    base_backoff: float = 0.2
    max_backoff: float = 5.0
    max_retry_after: float = 30.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_backoff, self.base_backoff * (2**attempt)))


def status_is_retryable(method: str, status: int) -> bool:
    """429 means the request was refused before processing, so it is safe for any method."""
    if status == 429:
        return True
    return method.upper() in IDEMPOTENT_METHODS and status in RETRYABLE_STATUSES


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).

    Returns None when absent or unparseable (the caller then uses its own backoff)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())
