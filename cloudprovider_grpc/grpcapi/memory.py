"""How many malloc arenas the server's threads share (glibc only).

glibc gives threads their own malloc arenas, up to eight per core. The gRPC server runs its handlers
on a thread pool, and each worker that once parsed a large request keeps the pages its arena grew
by: the process's RSS then climbs by several megabytes under bursts of big or hostile requests and
stays there, though nothing leaks. Two arenas keep the footprint flat at no measurable cost for a
server whose threads mostly wait (`benchmarks/robustness.py` shows the RSS figures either way).
An operator's own `MALLOC_ARENA_MAX` is left alone, and so is any other C library.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

#: glibc's mallopt parameter number for the arena limit (malloc.h: M_ARENA_MAX -8)
_M_ARENA_MAX = -8
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Call before grpc is imported (its core starts threads that fix the limit when they first
    allocate). True when the limit was set here."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False  # glibc read the operator's own setting at start
    try:
        # the symbols the process already has (the interpreter links the C library), not a search
        # by name: ctypes.util.find_library runs `ldconfig -p` in a child process on every start
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  (present in glibc only: musl has no arenas to limit)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_ARENA_MAX, arenas) == 1
    if ok:
        log.debug("malloc arenas limited to %d", arenas)
    return ok


__all__ = ["ARENAS", "limit_malloc_arenas"]
