"""NodeGroupGetOptions: what each cluster-autoscaler release is answered.

The rules, each from CA's own client (cloudprovider/externalgrpc/externalgrpc_node_group.go,
GetOptions, at the tags named) and config processor (processors/nodegroupconfig):
- Never an error for a known group. CA 1.25-1.28 return UNIMPLEMENTED as a raw error (the mapping
  to "not implemented" came with 1.29.0), and on every release the config processor passes any other
  error up from every per-group getter: no node is ever eligible for scale-down and scale-up
  requests are not registered (cluster-autoscaler-1.36.1 core/scaledown/eligibility/eligibility.go:
  134-185, clusterstate/clusterstate.go:287-292).
- `defaults` CA could send but we cannot use (negative, malformed or out-of-range durations,
  non-finite ratios: CA accepts negative duration flags, cluster-autoscaler-1.36.1
  config/flags/flags.go:84-89,129) get the answer of a request without defaults: the group's
  options from our config over CA's flag defaults, or no options. One warning a minute names what
  CA sent.
- A group without overrides gets an answer with no options. Every release reads it as "no per-group
  options" (its client returns nil, nil) and keeps its own defaults.
- A release whose client drops one of the answered times and would use 0 for it gets no options
  for any group (see wire.time_read_as_zero): CA 1.25-1.28 (the max node provision time) and CA
  1.35-1.36 (the max node startup time, kubernetes/autoscaler#10245). The groups whose overrides are
  withheld are named in a warning, at most one a minute.
- CA 1.37 and later send their max node startup time as field 11 (a Duration): the answer carries
  the group's value there.
- Options that are answered echo, after our fields, the other fields of the request's `defaults` our
  schema does not know, byte for byte: a CA newer than our schema gets its own defaults back for
  them.
- An unknown group is NOT_FOUND (the provider raises it), for every release.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from cloudprovider_grpc.core.errors import InvalidArgument, NotImplementedByProvider
from cloudprovider_grpc.grpcapi.outcome import safe_message
from cloudprovider_grpc.grpcapi.prebuilt import Memo, Prebuilt
from cloudprovider_grpc.grpcapi.wire import (
    encode_varint,
    options_from_pb,
    options_to_pb,
    startup_bytes,
    startup_field,
    startup_seconds,
    time_read_as_zero,
    unknown_fields,
)
from cloudprovider_grpc.observability.logs import OncePer
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions, CloudProvider

log = logging.getLogger(__name__)

#: no per-group options (cluster-autoscaler-1.25.0 .. 1.36.x: `if pbOpts == nil { return nil, nil }`)
NO_OPTIONS = Prebuilt.of(pb.NodeGroupAutoscalingOptionsResponse())

_OPTIONS_DESCRIPTOR = pb.NodeGroupAutoscalingOptions.DESCRIPTOR


@dataclass(frozen=True)
class _Defaults:
    """What the `defaults` of one encoding tell: the values to merge the group's overrides into (ours
    where CA sent none or unusable ones), the fields to echo, whether to answer field 11, the
    releases that would read an answered time as 0 (None: every time is read), and what was wrong
    with the values CA sent (None: nothing)."""

    options: AutoscalingOptions
    unknown: bytes = b""
    startup: bool = False
    zero_reader: str | None = None
    problem: str | None = None


def _defaults_of(key: tuple[bool, bytes]) -> _Defaults:
    """From (has defaults, their encoding): what they tell (see _Defaults)."""
    present, raw = key
    if not present:
        return _Defaults(AutoscalingOptions())
    defaults = pb.NodeGroupAutoscalingOptions.FromString(raw)
    all_unknown = unknown_fields(raw, _OPTIONS_DESCRIPTOR)
    startup, unknown = startup_field(all_unknown)
    zero_reader = time_read_as_zero(defaults, all_unknown)
    try:
        options = options_from_pb(defaults)
        if startup is not None:
            options = options.merged({"max_node_startup_time": startup_seconds(startup)})
    except InvalidArgument as exc:
        # as without defaults: the other fields CA sent are not echoed either
        return _Defaults(AutoscalingOptions(), b"", startup is not None, zero_reader, str(exc))
    return _Defaults(options, unknown, startup is not None, zero_reader)


def _answer(key: tuple[AutoscalingOptions, bytes, bool]) -> Prebuilt:
    """The answer carrying `options` (field 11 too when asked for), then the echoed fields byte for
    byte."""
    options, unknown, startup = key
    body = options_to_pb(options).SerializeToString()
    if startup:
        body += startup_bytes(options.max_node_startup_time)
    body += unknown
    raw = b"\x0a" + encode_varint(len(body)) + body  # field 1 (nodeGroupAutoscalingOptions), length-delimited
    return Prebuilt(pb.NodeGroupAutoscalingOptionsResponse.FromString(raw), raw)


class _UnusableDefaults:
    """The warning that CA sent defaults we cannot use: at most one per `interval`."""

    def __init__(self, interval: float = 60.0) -> None:
        self._once = OncePer(interval)

    def note(self, group_id: str, problem: str) -> None:
        suppressed = self._once.due()
        if suppressed is None:
            return
        log.warning(
            "NodeGroupGetOptions(%r): cluster-autoscaler sent defaults that cannot be used: %s; answered "
            "as a request without defaults (the group's configured options over cluster-autoscaler's "
            "flag defaults, or no options) (%d more such requests since the last warning; at most one "
            "warning per %.0fs)",
            group_id,
            safe_message(problem),
            suppressed,
            self._once.interval,
        )


class _OverridesWithheld:
    """The warning that per-group option overrides are withheld from the releases that would read one
    of the answered times as 0: at most one per `interval`, naming every group asked for since the
    previous one, by the releases that asked."""

    def __init__(self, interval: float = 60.0) -> None:
        self._once = OncePer(interval)
        self._lock = threading.Lock()
        self._groups: dict[str, set[str]] = {}

    def note(self, group_id: str, zero_reader: str) -> None:
        with self._lock:
            groups = self._groups.setdefault(zero_reader, set())
            if len(groups) < 1000:  # bounded: a client can send endless group ids
                groups.add(group_id)
        suppressed = self._once.due()
        if suppressed is None:
            return
        with self._lock:
            pending, self._groups = self._groups, {}
        for reader, ids in sorted(pending.items()):
            names = sorted(ids)
            shown = ", ".join(repr(g) for g in names[:20])
            if len(names) > 20:
                shown += f" and {len(names) - 20} more"
            log.warning(
                "NodeGroupGetOptions: the option overrides of node groups %s are not applied: %s from "
                "the answer and would use 0, so it is answered with no per-group options and keeps its "
                "own defaults; cluster-autoscaler 1.29 to 1.34 and 1.37 and later apply them (%d more "
                "such requests since the last warning; at most one warning per %.0fs)",
                shown,
                reader,
                suppressed,
                self._once.interval,
            )


class OptionsAnswers:
    """The NodeGroupGetOptions answers of one provider, built once per distinct request content."""

    def __init__(self, provider: CloudProvider) -> None:
        self._provider = provider
        # the defaults CA sent, by encoding; the merged options' answers (see Prebuilt): both are
        # pure functions of their keys
        self._defaults: Memo[tuple[bool, bytes], _Defaults] = Memo(256)
        self._answers: Memo[tuple[AutoscalingOptions, bytes, bool], Prebuilt] = Memo(1024)
        self._withheld = _OverridesWithheld()
        self._unusable = _UnusableDefaults()

    def answer(self, request: pb.NodeGroupAutoscalingOptionsRequest) -> Prebuilt:
        # CA sends the same defaults on every call: decoded (and its release told) once per encoding
        defaults = self._defaults.get(
            (request.HasField("defaults"), request.defaults.SerializeToString()), _defaults_of
        )
        options = self._group_options(request.id, defaults.options)
        if defaults.problem is not None:
            self._unusable.note(request.id, defaults.problem)
        if options is None:
            return NO_OPTIONS
        if defaults.zero_reader is not None:
            self._withheld.note(request.id, defaults.zero_reader)
            return NO_OPTIONS
        return self._answers.get((options, defaults.unknown, defaults.startup), _answer)

    def _group_options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions | None:
        """The provider's options for the group; None for no overrides, also from a backend that
        still says so with NotImplementedByProvider (that status must not reach CA from here)."""
        try:
            return self._provider.options(group_id, defaults)
        except NotImplementedByProvider:
            return None
