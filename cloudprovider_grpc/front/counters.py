"""The counters file the front writes (atomic adds on a shared mapping) and Python reads at scrape
time: per (cacheable method, gRPC code) a count, a sum of durations in nanoseconds and one
non-cumulative count per latency bucket plus +Inf. The layout is documented in counters.go."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc

#: gRPC status codes 0..16, by value
_CODES = {code.value[0]: code for code in grpc.StatusCode}
NUM_CODES = 17


class FrontCounters:
    def __init__(self, path: Path, methods: Sequence[str], buckets: Sequence[float]) -> None:
        self.path = path
        self.methods = tuple(methods)
        self.buckets = tuple(buckets)
        self._slot = 2 + len(self.buckets) + 1
        size = len(self.methods) * NUM_CODES * self._slot * 8
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._words = memoryview(self._map).cast("Q")

    def read(self) -> Iterator[tuple[str, grpc.StatusCode, int, float, list[int]]]:
        """(method, code, count, sum in seconds, per-bucket counts incl. +Inf) for every slot used.

        Aligned 8-byte loads are atomic on the platforms Go's atomics run on; a scrape racing a call
        may see its count before its bucket, which the next scrape settles (Prometheus tolerates it)."""
        words = self._words
        for m, method in enumerate(self.methods):
            for value in range(NUM_CODES):
                base = (m * NUM_CODES + value) * self._slot
                count = words[base]
                if count:
                    buckets = list(words[base + 2 : base + self._slot])
                    yield method, _CODES[value], count, words[base + 1] / 1e9, buckets
