"""The shared HTTP layer for cloud API clients (timeouts, retries, rate limit, metrics, redaction).
It imports core and observability only."""

from cloudprovider_grpc.http.client import BearerAuth, HttpClient, Reply, SecretAuth, error_message_from_body
from cloudprovider_grpc.http.retry import RetryPolicy, parse_retry_after, status_is_retryable

__all__ = [
    "BearerAuth",
    "HttpClient",
    "Reply",
    "RetryPolicy",
    "SecretAuth",
    "error_message_from_body",
    "parse_retry_after",
    "status_is_retryable",
]
