"""Small helpers of the RPC tests (tests/grpcapi/test_rpcs.py, test_rpcs_backend_gaps.py): a
timestamp, the status and message of a call expected to fail, and a serialized pending pod as CA
sends it to the pricing RPCs."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from cloudprovider_grpc.protos import k8s_pb2


def ts(seconds: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds)


def code_of(call: Callable[..., object], request: Message) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=5)
    return info.value.code(), info.value.details()


def make_pod(cpu: str, memory: str) -> bytes:
    pod = k8s_pb2.Pod()
    pod.metadata.name = "web-1"
    c = pod.spec.containers.add(name="web")
    c.resources.requests["cpu"].string = cpu
    c.resources.requests["memory"].string = memory
    return pod.SerializeToString()
