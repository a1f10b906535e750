"""Errors that carry their gRPC status.

Providers raise these; the service maps them to status codes in one place (grpcapi/outcome.py), so a
backend never touches gRPC and a handler never returns UNKNOWN or a traceback. Messages must be
safe to show to the caller: no secrets, no stack traces.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import grpc


class ProviderError(Exception):
    """Base class: an error with a gRPC status code and a caller-safe message."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ProviderError):
    """An unknown node group id."""

    code = grpc.StatusCode.NOT_FOUND


class InvalidArgument(ProviderError):
    """A malformed request: non-positive delta, a node that is not in the group."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(ProviderError):
    """A well-formed request the group's current state forbids (beyond max/min size)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ProviderError):
    """The cloud could not be reached, timed out or throttled us; the caller may try again later."""

    code = grpc.StatusCode.UNAVAILABLE


class NotImplementedByProvider(ProviderError):
    """An optional capability (pricing, templates) the backend does not have.

    CA maps UNIMPLEMENTED to cloudprovider.ErrNotImplemented from 1.29 on, and only for the two
    pricing RPCs, NodeGroupTemplateNodeInfo and NodeGroupGetOptions; CA 1.25-1.28 take it as a plain
    error. NodeGroupGetOptions never answers it for a known group (see getoptions.py).
    """

    code = grpc.StatusCode.UNIMPLEMENTED


class ConfigError(Exception):
    """Invalid configuration; `key` names the offending setting for the one-line CLI message."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"invalid configuration: {key}: {problem}")
        self.key = key
        self.problem = problem


class ServerStartError(Exception):
    """The server could not start (port in use, unreadable certificates); importable from
    cloudprovider_grpc.server.assembly as well."""


class ConfigErrors(ConfigError):
    """Several independent problems found in one pass, reported together in one line, so a first
    run is not a loop of fixing one setting and being told about the next."""

    def __init__(self, problems: list[ConfigError]) -> None:
        listed = "; ".join(f"{p.key}: {p.problem}" for p in problems)
        super().__init__(problems[0].key, f"{len(problems)} problems: {listed}")
        self.problems = problems
        self.args = (f"invalid configuration: {len(problems)} problems: {listed}",)


def raise_all(problems: list[ConfigError]) -> None:
    """Raise the one problem found, or all of them together; nothing when the list is empty."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ConfigErrors(problems)


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the known key nearest to a misspelt one (difflib), else ''."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_key(
    where: str, key: str, known: Iterable[str], *, what: str = "key", note: str = ""
) -> ConfigError:
    """The one error for a key nobody reads: names it, suggests the nearest known one and lists them
    when none is near (a typo must never fall back to a default silently)."""
    names = sorted(set(known))
    suggestion = did_you_mean(key, names)
    listed = f" (known: {', '.join(names)})" if names and not suggestion else ""
    return ConfigError(where, f"unknown {what}{note}{suggestion}{listed}")
