"""OpenTelemetry traces end to end: `serve` with the OTEL_* variables exports over OTLP/gRPC to a
real receiver (opentelemetry-proto's TraceService on loopback), and a scale-up is ONE trace from
the IncreaseSize RPC through the background job to the cloud's create call, with the compiled front
on and off. Without the variables nothing of OpenTelemetry is imported."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from cloudprovider_grpc.observability import tracing
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.backends import backend
from tests.support.ports import free_port
from tests.support.probes import start_server
from tests.support.waits import poll

SECRET = "cherry-token-traced-7c1e"


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver keeping every span with its resource's attributes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[Any] = []
        self.resources: list[dict[str, str]] = []
        self.raw: list[bytes] = []

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.lock:
            self.raw.append(request.SerializeToString())
            for rs in request.resource_spans:
                self.resources.append({a.key: a.value.string_value for a in rs.resource.attributes})
                for scope in rs.scope_spans:
                    self.spans.extend(scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()

    def named(self, name: str) -> list[Any]:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def trace(self, trace_id: bytes) -> list[Any]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    sink = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port(f"127.0.0.1:{free_port()}")
    server.start()
    try:
        yield sink, port
    finally:
        server.stop(0)


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


@pytest.mark.integration
@pytest.mark.parametrize("front", ["off", "on"])
def test_a_scale_up_is_one_trace_from_the_rpc_through_the_job_to_the_cloud_call(
    front: str, receiver: tuple[Receiver, int], tmp_path: Path, compiled_front: Path | None
) -> None:
    if front == "on" and compiled_front is None:
        pytest.skip("the compiled front could not be built here (no Go)")
    sink, port = receiver
    cherry = backend("cherry")
    config = tmp_path / "cherry.yaml"
    config.write_text(cherry.e2e_config)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_SERVICE_NAME": "cpg-traced",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "CHERRY_AUTH_TOKEN": SECRET,
    }
    server = start_server(cherry, tmp_path, extra=["--config", str(config), "--front", front], env=env)
    try:
        s = server.stub()
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="workers", delta=1), timeout=5)
        create = poll(
            lambda: next(iter(sink.named("POST /projects/{id}/servers")), None), 30, "the create call's span"
        )

        def chain() -> tuple[Any, Any] | None:
            """(rpc, job) once both are exported: a span is exported when it ends, so the job's
            and the RPC's may come in a later batch than the cloud call's."""
            spans = {x.span_id: x for x in sink.trace(create.trace_id)}
            job = spans.get(create.parent_span_id)
            rpc = spans.get(job.parent_span_id) if job is not None else None
            return (rpc, job) if rpc is not None else None

        rpc, job = poll(chain, 30, "the create call's job and RPC spans")
        service = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"
        assert rpc.name == f"{service}/NodeGroupIncreaseSize" and rpc.parent_span_id == b""
        assert rpc.kind == rpc.SPAN_KIND_SERVER
        assert _attrs(rpc)["rpc.method"] == "NodeGroupIncreaseSize"
        assert _attrs(rpc)["rpc.grpc.status_code"] == 0
        assert job.name == "job create machine" and _attrs(job)["job.attempt"] == 1
        call = _attrs(create)
        assert create.kind == create.SPAN_KIND_CLIENT
        assert call["http.request.method"] == "POST" and call["url.template"] == "/projects/{id}/servers"
        assert call["http.response.status_code"] == 201 and call["http.request.resend_count"] == 0
        assert call["cloud.throttled"] == 0 and call["cloud.backend"] == "cherry"
        assert {"service.name": "cpg-traced"}.items() <= sink.resources[0].items()
        # the Refresh CA sends next is a trace of its own, its listing a child of it
        s.Refresh(pb.RefreshRequest(), timeout=5)
        refresh = poll(lambda: next(iter(sink.named(f"{service}/Refresh")), None), 30, "the Refresh span")
        listings = [x for x in sink.trace(refresh.trace_id) if x.parent_span_id == refresh.span_id]
        assert listings and all(x.kind == x.SPAN_KIND_CLIENT for x in listings)
        with sink.lock:
            assert not any(SECRET.encode() in raw for raw in sink.raw)
    finally:
        server.close()


@pytest.mark.integration
def test_without_otel_variables_nothing_of_opentelemetry_is_imported() -> None:
    probe = (
        "import sys, os\n"
        "from cloudprovider_grpc.server import assembly\n"
        "from cloudprovider_grpc.observability import tracing\n"
        "assert not tracing.configure({}), 'traces on without variables'\n"
        "assert not tracing.configure({'OTEL_TRACES_EXPORTER': 'none', 'OTEL_EXPORTER_OTLP_ENDPOINT': 'x'})\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_the_standard_variables_decide(env: dict[str, str], on: bool) -> None:
    assert tracing.wanted(env) is on


@pytest.mark.unit
@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/projects/123456/servers", "/projects/{id}/servers"),
        ("servers/987", "/servers/{id}"),
        ("/v2/instance-pool/6e1f4b2a-90d3-4c1e-bf0a-2f4d6e8a9b10:scale", "/v2/instance-pool/{id}:scale"),
        ("/v2/kubernetes/clusters/abc-123/node-pools", "/v2/kubernetes/clusters/{id}/node-pools"),
        ("/?Action=DescribeScalingGroups&Signature=abc", "/"),
    ],
)
def test_paths_are_templated_without_ids_or_queries(path: str, template: str) -> None:
    assert tracing.path_template(path) == template
