"""Switchable, seeded fault injection for API emulators.

A `FaultPlan` decides, per request, whether the emulator misbehaves and how. The kinds are the
failures a cloud client meets in practice, chosen so tests can tell "refused" from "processed but the
answer was lost" (the case that makes creation tokens necessary):

- `error`: a 5xx before the request is processed (nothing happened in the cloud);
- `error_after`: the request is processed, then answered with a 5xx (a gateway losing the answer);
- `throttle`: 429 with Retry-After (or without, when `retry_after` is None), not processed;
- `slow`: the answer is delayed by `slow_seconds` (the client's read timeout fires first), processed;
- `drop`: the request is processed and the connection closed without an answer.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

FAULT_KINDS = ("error", "error_after", "throttle", "slow", "drop")


@dataclass
class FaultPlan:
    """`rate` is the fraction of requests that fail; `kinds` the faults drawn from (uniformly).

    `methods` restricts faults to some HTTP methods (None: all). Each HTTP method draws from its
    own random stream seeded from `seed`, so the n-th POST meets the same fault in every run however
    concurrent GETs interleave with it: a failing test run can be replayed. `pass_first` lets the
    first N requests of each such method through untouched, so a test can cut a batch of writes
    after exactly N of them, however fast the client sends them."""

    rate: float = 0.0
    kinds: tuple[str, ...] = ("error", "error_after", "throttle", "slow", "drop")
    seed: int = 0
    slow_seconds: float = 2.0
    retry_after: str | None = "1"
    error_statuses: tuple[int, ...] = (500, 502, 503)
    methods: frozenset[str] | None = None
    pass_first: int = 0
    _rngs: dict[str, random.Random] = field(init=False, repr=False, default_factory=dict)
    _passed: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("fault rate must be between 0 and 1")
        unknown = set(self.kinds) - set(FAULT_KINDS)
        if unknown or not self.kinds:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")

    @classmethod
    def none(cls) -> FaultPlan:
        return cls(rate=0.0)

    def choose(self, method: str) -> tuple[str, int] | None:
        """(kind, status for `error`/`error_after`) for this request, or None for a normal answer."""
        if self.rate <= 0.0 or (self.methods is not None and method.upper() not in self.methods):
            return None
        method = method.upper()
        with self._lock:
            passed = self._passed.get(method, 0)
            if passed < self.pass_first:
                self._passed[method] = passed + 1
                return None
            rng = self._rngs.get(method)
            if rng is None:
                rng = self._rngs[method] = random.Random(f"{self.seed}:{method}")
            if rng.random() >= self.rate:
                return None
            return rng.choice(self.kinds), rng.choice(self.error_statuses)
