"""Answers encoded once and served many times, and the bounded memo that holds them.

CA asks NodeGroupGetOptions, NodeGroupForNode and NodeGroupTargetSize per node, several times a
loop; building and encoding their answers was most of the server's own per-call work.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Prebuilt:
    """A response encoded once and served many times: the raw-bytes path sends `raw` without
    encoding anything, the typed path (a servicer method called with a message) gets the same
    message object every time.

    Why: CA asks NodeGroupGetOptions, NodeGroupForNode and NodeGroupTargetSize per node, several
    times a loop (~5,000 calls per loop at 1,000 nodes); building and encoding the answer
    was most of our own per-call work (GetOptions: 34 us in-process, of which converting and encoding
    the options was ~27 us)."""

    message: Any
    raw: bytes

    @classmethod
    def of(cls, message: Any) -> Prebuilt:
        return cls(message, message.SerializeToString())


class Memo(Generic[K, V]):
    """A bounded memo of a pure function of its key: nothing it holds can go stale, because the key is
    everything the value depends on. Cleared when full (CA sends a handful of distinct keys; a client
    sending endless distinct ones only costs the recomputation)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._values: dict[K, V] = {}

    def get(self, key: K, compute: Callable[[K], V]) -> V:
        try:
            return self._values[key]
        except KeyError:
            pass
        value = compute(key)
        if len(self._values) >= self._limit:
            self._values.clear()
        self._values[key] = value
        return value
