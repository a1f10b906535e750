"""A term fence for cloud writes, checked by the HTTP client right before each request leaves.

The write gate (`providers/machinery/gate.py`) is asked once, before a background job calls the driver; a
leader's term can still run out after that answer: while the job waits for a rate-limit token,
sleeps between retries, or while the whole process is frozen (SIGSTOP, a paused VM) and resumes
after another replica took over. So a job runs inside `fenced(check)`, and `HttpClient` calls
`check_fence()` right before every attempt: once the check says no, nothing more is sent on that
job. The check lives in a context variable, so it follows the job's own thread and no driver has to
pass it along.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from cloudprovider_grpc.core.clouderrors import CloudError

_FENCE: ContextVar[Callable[[], bool] | None] = ContextVar("cloudprovider_grpc_write_fence", default=None)


class FencedOff(CloudError):
    """The request was not sent: the term the job ran on is over. Never transient (nothing to
    retry on this term) and never ambiguous (nothing left the process)."""

    def __init__(self, where: str) -> None:
        super().__init__(f"{where}: not sent: the leadership term is over", code="NOT_LEADER")


@contextmanager
def fenced(check: Callable[[], bool] | None) -> Iterator[None]:
    """Run the body with `check` as the fence of every HTTP request it makes (None: no fence)."""
    token = _FENCE.set(check)
    try:
        yield
    finally:
        _FENCE.reset(token)


def check_fence(where: str) -> None:
    """Raise FencedOff when a fence is set and says the term is over."""
    check = _FENCE.get()
    if check is not None and not check():
        raise FencedOff(where)


__all__ = ["FencedOff", "check_fence", "fenced"]
