"""OpenTelemetry traces, on only when the standard OTEL_* variables ask for them.

A span per RPC (server side, named `<service>/<method>` with the rpc.* attributes), per background
job attempt, and per cloud API call (client side: method, path template, status, retries, 429s),
linked so that a scale-up is ONE trace: the IncreaseSize span is the parent of each attempt of the
job it queued (the job carries the context it was submitted in), and each cloud call is a child of
the job or RPC that made it. Exported over OTLP/gRPC by the SDK's exporter, which reads
OTEL_EXPORTER_OTLP_ENDPOINT / _TRACES_ENDPOINT, _HEADERS, _TIMEOUT, _INSECURE, _CERTIFICATE itself;
the SDK reads OTEL_SERVICE_NAME (default here: cloudprovider-grpc), OTEL_RESOURCE_ATTRIBUTES and
OTEL_TRACES_SAMPLER.

Off (no variable set, OTEL_TRACES_EXPORTER=none, or OTEL_SDK_DISABLED=true): nothing of
OpenTelemetry is imported, and each instrumented place costs one comparison with None.

No attribute carries a secret: no URL query (AliCloud signs its requests there), no header, no
body; paths are templated (ids become `{id}`), and error texts pass the same redaction as the logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

#: the tracer while traces are on, else None (the one check every instrumented place makes)
TRACER: Any = None
_PROVIDER: Any = None
DEFAULT_SERVICE_NAME = "cloudprovider-grpc"


def wanted(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the OTEL_* variables ask for traces (the SDK's own reading of them)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if exporters:
        return "otlp" in exporters
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(env: Mapping[str, str] = os.environ) -> bool:
    """Turn traces on if the environment asks for them (once per process); True when on."""
    global TRACER, _PROVIDER
    if TRACER is not None:
        return True
    if not wanted(env):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
            "pip install 'cloudprovider-grpc[otel]'; running without traces"
        )
        return False
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    )
    if protocol != "grpc":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: traces are exported over OTLP/gRPC only", protocol)
    from cloudprovider_grpc import __version__

    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _PROVIDER = provider
    TRACER = trace.get_tracer("cloudprovider_grpc", __version__)
    log.info("traces on: OTLP/gRPC to %s", _endpoint(env))
    return True


def _endpoint(env: Mapping[str, str]) -> str:
    return env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4317"
    )


def shutdown(timeout: float = 5.0) -> None:
    """Send what is buffered. The server calls it on its way out: the process ends with os._exit,
    which runs no atexit handler."""
    if _PROVIDER is not None:
        with contextlib.suppress(Exception):
            _PROVIDER.force_flush(int(timeout * 1000))


# ---------------------------------------------------------------------- RPCs
def start_rpc(service: str, method: str) -> tuple[Any, Any]:
    """A server span for one RPC, made current on this thread; end it with `end_rpc`."""
    from opentelemetry import context, trace

    span = TRACER.start_span(
        f"{service}/{method}",
        kind=trace.SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
    )
    return span, context.attach(trace.set_span_in_context(span))


def end_rpc(started: tuple[Any, Any], code: Any) -> None:
    from opentelemetry import context, trace

    span, token = started
    span.set_attribute("rpc.grpc.status_code", int(code.value[0]))
    if code.name != "OK":
        span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))
    span.end()
    context.detach(token)


# ---------------------------------------------------------------------- background jobs
def carry(job: Callable[[], float | None], what: str, runner: str) -> Callable[[], float | None]:
    """`job`, each attempt of which runs in a span that is a child of the span current now (the RPC
    or Refresh that queued it): the scale-up stays one trace across the worker threads."""
    if TRACER is None:
        return job
    from opentelemetry import context

    parent = context.get_current()
    attempts = [0]

    def traced() -> float | None:
        token = context.attach(parent)
        try:
            attempts[0] += 1
            attributes = {"job.runner": runner, "job.attempt": attempts[0]}
            with TRACER.start_as_current_span(f"job {what}", attributes=attributes) as span:
                retry_in = job()
                if retry_in is not None:
                    span.set_attribute("job.retry_in_seconds", float(retry_in))
                return retry_in
        finally:
            context.detach(token)

    return traced


# ---------------------------------------------------------------------- cloud API calls
_VERSION = re.compile(r"v\d+(\.\d+)*")
_DIGIT = re.compile(r"\d")


def _segment(part: str) -> str:
    if _VERSION.fullmatch(part) or not _DIGIT.search(part):
        return part
    _, colon, action = part.partition(":")  # Exoscale's `<id>:scale` keeps its action
    return "{id}" + (colon + action if action.isalpha() else "")


def path_template(path: str) -> str:
    """`/projects/123/servers` -> `/projects/{id}/servers`: ids (any segment with a digit, except
    an API version) are not the call's kind, and may name a customer's things."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    return "/" + "/".join(_segment(p) for p in parts)


@contextlib.contextmanager
def cloud_call(backend: str, operation: str, method: str, path: str, host: str) -> Iterator[Any]:
    """A client span around one cloud API call and its retries; yields the span (None when off)."""
    if TRACER is None:
        yield None
        return
    from opentelemetry import trace

    template = path_template(path)
    attributes = {
        "http.request.method": method,
        "url.template": template,
        "server.address": host,
        "cloud.backend": backend,
        "cloud.operation": operation,
    }
    with TRACER.start_as_current_span(
        f"{method} {template}",
        kind=trace.SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def end_cloud_call(span: Any, *, status: int | None, resends: int, throttled: int, error: str = "") -> None:
    from opentelemetry import trace

    from cloudprovider_grpc.core.secrets import redact

    if status is not None:
        span.set_attribute("http.response.status_code", status)
    span.set_attribute("http.request.resend_count", resends)
    span.set_attribute("cloud.throttled", throttled)
    if error:
        span.set_status(trace.Status(trace.StatusCode.ERROR, redact(error)[:256]))


__all__ = ["TRACER", "carry", "cloud_call", "configure", "end_rpc", "path_template", "shutdown", "start_rpc"]
