"""What the server tells people and other systems: structured logs, Prometheus metrics and the
metrics/health HTTP port, traces, the status page and the status ConfigMap with Kubernetes Events.
It may import config and core, and read what it reports on: the provider contract, the machinery's
activity record (providers/machinery/activity.py) and the Lease (ha/lease.py); never the gRPC
surface."""
