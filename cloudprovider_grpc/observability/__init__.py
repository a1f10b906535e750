"""What every part tells people and other systems: structured logs, Prometheus metrics, traces, the
status document in cluster-autoscaler's shape and the correlation of Kubernetes Events. It imports
only core, so any floor above may report through it; what reads the whole running server (the
metrics and probe port, /status, the status ConfigMap's writer) lives in server/."""
