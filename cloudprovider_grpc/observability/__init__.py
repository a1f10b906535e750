"""What the server tells people and other systems: structured logs, Prometheus metrics and the
metrics/health HTTP port, traces, the status page and the status ConfigMap with Kubernetes Events.
It may import config, core and k8s; never providers or the gRPC surface (they report into it)."""
