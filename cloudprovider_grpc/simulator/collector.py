"""The cyclic garbage collector paused while the simulator builds and walks large acyclic data.

A 100,000-pod snapshot parses into millions of dicts and lists, and a simulation of it holds
100,000 pods: trees without reference cycles, freed by reference counting the moment they are
dropped. CPython's cyclic collector nevertheless walks them again and again as they are made
(its full passes scan every tracked object), and finds next to nothing: measured on the
5,000-node benchmark snapshot, those passes were about half the CPU of loading it and deciding
its first loop (`benchmarks/simulate.py --size 5000`), and three quarters of the JSON parse.
Pausing it changes no result, only when the few cyclic leftovers (an exception's traceback)
are reclaimed: at the end of the paused section, when the collector runs again as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's earlier state after it (so that
    nested pauses, or a caller that disabled it, keep theirs)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
