"""NodeGroupGetOptions: what each cluster-autoscaler release is answered.

The rules, each from CA's own client (cloudprovider/externalgrpc/externalgrpc_node_group.go,
GetOptions, at the tags named) and config processor (processors/nodegroupconfig):
- Never UNIMPLEMENTED for a known group. CA 1.25-1.28 return that status as a raw error (the mapping
  to "not implemented" came with 1.29.0), and their config processor passes any other error up from
  every per-group getter: scale-down would never happen.
- A group without overrides gets an answer with no options. Every release reads it as "no per-group
  options" (its client returns nil, nil) and keeps its own defaults; CA 1.35 and later would read
  a max node startup time of 0 from any answered options.
- A request of CA 1.25-1.28 (see wire.from_ca_before_1_29) gets no options for any group: those
  releases never read MaxNodeProvisionTime from the answer and would use 0. The groups whose
  overrides are withheld are named in a warning, at most one a minute.
- Options that are answered echo, after our fields, the fields of the request's `defaults` our schema
  does not know, byte for byte: a CA newer than our schema gets its own defaults back for them.
- An unknown group is NOT_FOUND (the provider raises it), for every release.
"""

from __future__ import annotations

import logging
import threading

from cloudprovider_grpc.core.errors import NotImplementedByProvider
from cloudprovider_grpc.grpcapi.prebuilt import Memo, Prebuilt
from cloudprovider_grpc.grpcapi.wire import (
    from_ca_before_1_29,
    options_from_pb,
    options_to_pb,
    unknown_fields,
)
from cloudprovider_grpc.observability.logs import OncePer
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import AutoscalingOptions, CloudProvider

log = logging.getLogger("cloudprovider_grpc.grpcapi.servicer")

#: no per-group options (cluster-autoscaler-1.25.0 .. 1.36.x: `if pbOpts == nil { return nil, nil }`)
NO_OPTIONS = Prebuilt.of(pb.NodeGroupAutoscalingOptionsResponse())

_OPTIONS_DESCRIPTOR = pb.NodeGroupAutoscalingOptions.DESCRIPTOR


def _defaults_of(key: tuple[bool, bytes]) -> tuple[AutoscalingOptions, bytes] | None:
    """From (has defaults, their encoding): the values (ours when the request has none) and the
    encoded fields our schema does not know; None for the defaults of CA 1.25-1.28. Raises
    InvalidArgument (never memoised) for malformed values."""
    present, raw = key
    if not present:
        return AutoscalingOptions(), b""
    defaults = pb.NodeGroupAutoscalingOptions.FromString(raw)
    if from_ca_before_1_29(defaults):
        return None
    return options_from_pb(defaults), unknown_fields(raw, _OPTIONS_DESCRIPTOR)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _answer(key: tuple[AutoscalingOptions, bytes]) -> Prebuilt:
    """The answer carrying `options`, followed by the defaults' unknown fields byte for byte."""
    options, unknown = key
    body = options_to_pb(options).SerializeToString() + unknown
    raw = b"\x0a" + _varint(len(body)) + body  # field 1 (nodeGroupAutoscalingOptions), length-delimited
    return Prebuilt(pb.NodeGroupAutoscalingOptionsResponse.FromString(raw), raw)


class _OverridesWithheld:
    """The warning that per-group option overrides are withheld from CA 1.25-1.28: at most one per
    `interval`, naming every group asked for since the previous one."""

    def __init__(self, interval: float = 60.0) -> None:
        self._once = OncePer(interval)
        self._lock = threading.Lock()
        self._groups: set[str] = set()

    def note(self, group_id: str) -> None:
        with self._lock:
            if len(self._groups) < 1000:  # bounded: a client can send endless group ids
                self._groups.add(group_id)
        suppressed = self._once.due()
        if suppressed is None:
            return
        with self._lock:
            groups, self._groups = sorted(self._groups), set()
        shown = ", ".join(repr(g) for g in groups[:20])
        if len(groups) > 20:
            shown += f" and {len(groups) - 20} more"
        log.warning(
            "NodeGroupGetOptions: the option overrides of node groups %s are not applied: "
            "cluster-autoscaler 1.25 to 1.28 cannot read a max node provision time from the answer and "
            "would use 0, so it is answered with no per-group options and keeps its own defaults; "
            "cluster-autoscaler 1.29 and later apply them (%d more such requests since the last warning; "
            "at most one warning per %.0fs)",
            shown,
            suppressed,
            self._once.interval,
        )


class OptionsAnswers:
    """The NodeGroupGetOptions answers of one provider, built once per distinct request content."""

    def __init__(self, provider: CloudProvider) -> None:
        self._provider = provider
        # the defaults CA sent, by encoding; the merged options' answers (see Prebuilt): both are
        # pure functions of their keys
        self._defaults: Memo[tuple[bool, bytes], tuple[AutoscalingOptions, bytes] | None] = Memo(256)
        self._answers: Memo[tuple[AutoscalingOptions, bytes], Prebuilt] = Memo(1024)
        self._withheld = _OverridesWithheld()

    def answer(self, request: pb.NodeGroupAutoscalingOptionsRequest) -> Prebuilt:
        # CA sends the same defaults on every call: decoded (and its release told) once per encoding
        defaults = self._defaults.get(
            (request.HasField("defaults"), request.defaults.SerializeToString()), _defaults_of
        )
        if defaults is None:  # CA 1.25-1.28
            if self._group_options(request.id, AutoscalingOptions()) is not None:
                self._withheld.note(request.id)
            return NO_OPTIONS
        options = self._group_options(request.id, defaults[0])
        if options is None:
            return NO_OPTIONS
        return self._answers.get((options, defaults[1]), _answer)

    def _group_options(self, group_id: str, defaults: AutoscalingOptions) -> AutoscalingOptions | None:
        """The provider's options for the group; None for no overrides, also from a backend that
        still says so with NotImplementedByProvider (that status must not reach CA from here)."""
        try:
            return self._provider.options(group_id, defaults)
        except NotImplementedByProvider:
            return None
