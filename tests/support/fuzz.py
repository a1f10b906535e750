"""A seeded fuzzer over all 15 externalgrpc RPCs, the health check and reflection, driven by the
service descriptors (a new field or RPC is fuzzed without changing this file).

Each case is raw request bytes for one method: random bytes, truncated messages, invalid UTF-8 in
string fields, and well-formed messages whose every field is hostile (extreme integers, NaN and
infinite doubles, NUL/newline and 100 KB strings, huge repeated fields and maps, garbage `nodeBytes`
and `pod_bytes`). Group ids are never real ones, so no case may change the server's state: `Outcome`
checks what came back, and the probes compare the state before and after.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from cloudprovider_grpc.protos import externalgrpc_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["CloudProvider"]
#: every method a single request can be sent to, by name: CloudProvider's 15, the health check and
#: reflection (one request, one answer); health Watch is left out, since a valid request never ends it
_TARGETS = [
    *SERVICE.methods,
    health_pb2.DESCRIPTOR.services_by_name["Health"].methods_by_name["Check"],
    reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].methods_by_name["ServerReflectionInfo"],
]
METHODS = {m.name: message_factory.GetMessageClass(m.input_type) for m in _TARGETS}
PATHS = {m.name: f"/{m.containing_service.full_name}/{m.name}" for m in _TARGETS}

_STRINGS = [
    "",
    "\0",
    "a\nb",
    "a\0b",
    "général-ü",
    "../../etc",
    "%s%n",
    "sim://\r\n",
    "🙂" * 50,
]
#: one long string per message at most: ids over the 8 KiB metadata limit when echoed
_LONG = "x" * 100_000
#: requests stay under grpcio's 4 MiB receive limit (bigger ones never reach our code)
MAX_BODY = 3_500_000
_INTS32 = [0, 1, -1, 2**31 - 1, -(2**31), 7]
_INTS64 = [0, -1, 2**63 - 1, -(2**63), 2**53 + 1]
_DOUBLES = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, -1e-308]
_BAD_UTF8 = [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\xc0"]

#: status codes a hostile request may legitimately get; UNKNOWN and INTERNAL are bugs
ALLOWED = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _fill(msg: Message, rng: random.Random, depth: int = 0, big: bool = True) -> None:
    """Set every field of `msg` to a hostile value (nested messages to depth 3). `big` allows one
    huge repeated field or map (thousands of entries); never nested inside another huge one."""
    desc: Descriptor = msg.DESCRIPTOR
    for f in desc.fields:
        if rng.random() < 0.3:
            continue
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            target = getattr(msg, f.name)
            for _ in range(rng.choice([1, 3, 2000] if big else [1, 3])):
                key = rng.choice(_STRINGS[:4]) + str(rng.random())
                value_field = f.message_type.fields_by_name["value"]
                if value_field.message_type is None:
                    target[key] = rng.choice(_STRINGS)
                else:
                    target[key]
            continue
        repeated = f.is_repeated
        count = rng.choice([1, 2, 5000] if big else [1, 2]) if repeated else 1
        for _ in range(count):
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                if depth >= 3:
                    break
                sub = getattr(msg, f.name).add() if repeated else getattr(msg, f.name)
                _fill(sub, rng, depth + 1, big and count == 1)
                if not repeated:
                    sub.SetInParent()
                continue
            value: object
            if f.type == FieldDescriptor.TYPE_STRING:
                value = _LONG if big and not repeated and rng.random() < 0.1 else rng.choice(_STRINGS)
            elif f.type == FieldDescriptor.TYPE_BYTES:
                value = rng.randbytes(rng.choice([0, 3, 64, 4096]))
            elif f.type in (
                FieldDescriptor.TYPE_INT32,
                FieldDescriptor.TYPE_SINT32,
                FieldDescriptor.TYPE_ENUM,
            ):
                value = rng.choice(_INTS32)
                if f.type == FieldDescriptor.TYPE_ENUM:
                    value = rng.choice([v.number for v in f.enum_type.values])
            elif f.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64):
                value = rng.choice(_INTS64)
            elif f.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
                value = rng.choice([0, 1, 2**32 - 1])
            elif f.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
                value = rng.choice([0, 1, 2**64 - 1])
            elif f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
                value = rng.choice(_DOUBLES)
            elif f.type == FieldDescriptor.TYPE_BOOL:
                value = rng.random() < 0.5
            else:
                continue
            if repeated:
                getattr(msg, f.name).append(value)
            else:
                with contextlib.suppress(ValueError, TypeError):  # a float refusing a huge double
                    setattr(msg, f.name, value)


def _bad_utf8(desc: Descriptor, rng: random.Random) -> bytes:
    """A frame putting invalid UTF-8 into one string field (proto3 strings must be valid)."""
    strings = [f for f in desc.fields if f.type == FieldDescriptor.TYPE_STRING]
    nested = [f for f in desc.fields if f.type == FieldDescriptor.TYPE_MESSAGE]
    if strings and (not nested or rng.random() < 0.6):
        f = rng.choice(strings)
        payload = rng.choice(_BAD_UTF8)
        return _varint(f.number << 3 | 2) + _varint(len(payload)) + payload
    if nested:
        f = rng.choice(nested)
        inner = _bad_utf8(f.message_type, rng)
        return _varint(f.number << 3 | 2) + _varint(len(inner)) + inner
    return rng.randbytes(8)


@dataclass
class Case:
    method: str
    kind: str
    body: bytes

    @property
    def path(self) -> str:
        return PATHS[self.method]


def cases(seed: int, count: int) -> Iterator[Case]:
    """`count` cases, round-robin over the methods, the same for the same seed."""
    rng = random.Random(seed)
    names = sorted(METHODS)
    kinds = ("random", "truncated", "bad-utf8", "hostile", "hostile")
    for i in range(count):
        method = names[i % len(names)]
        kind = kinds[(i // len(names)) % len(kinds)]
        cls = METHODS[method]
        if kind == "random":
            body = rng.randbytes(rng.choice([1, 5, 40, 300]))
        elif kind == "bad-utf8":
            body = _bad_utf8(cls.DESCRIPTOR, rng)
        else:
            msg = cls()
            _fill(msg, rng)
            body = msg.SerializeToString()
            while len(body) > MAX_BODY:
                msg = cls()
                _fill(msg, rng, big=False)
                body = msg.SerializeToString()
            if kind == "truncated":
                body = body[: rng.randrange(len(body))] if len(body) > 1 else b"\x0a\xff"
        yield Case(method, kind, body)


@dataclass
class Tally:
    """What a fuzz run saw."""

    requests: int = 0
    by_code: dict[str, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)

    def record(self, case: Case, code: grpc.StatusCode, details: str) -> None:
        self.requests += 1
        self.by_code[code.name] = self.by_code.get(code.name, 0) + 1
        problem = None
        if code not in ALLOWED:
            problem = f"status {code.name}"
        elif "\n" in details or "Traceback" in details:
            problem = "a multi-line message or traceback text"
        elif len(details) > 1100:
            problem = f"a {len(details)}-character message"
        if problem and len(self.bad) < 20:
            self.bad.append(
                f"{case.method} ({case.kind}, {len(case.body)} bytes): {problem}: {details[:200]!r}"
            )

    @property
    def failures(self) -> int:
        return sum(n for c, n in self.by_code.items() if grpc.StatusCode[c] not in ALLOWED)


def send(channel: grpc.Channel, case: Case, tally: Tally) -> tuple[str, str]:
    """Send one case, record it; (status code name, message) for comparisons."""
    call = channel.unary_unary(case.path)  # no serializers: raw bytes both ways
    try:
        call(case.body, timeout=10)
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    tally.record(case, code, details)
    return code.name, details


def state(channel: grpc.Channel) -> tuple:
    """Everything CA can observe about the groups: ids, bounds, target sizes, instances and states."""
    from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc

    s = pb_grpc.CloudProviderStub(channel)
    out = []
    for g in s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups:
        target = s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id=g.id), timeout=5).targetSize
        nodes = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=g.id), timeout=5).instances
        out.append(
            (g.id, g.minSize, g.maxSize, target, sorted((i.id, i.status.instanceState) for i in nodes))
        )
    return tuple(out)
