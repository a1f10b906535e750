"""The command-line flags cluster-autoscaler 1.36 defines, as facts, for checking that every argument a
layout passes to CA names a flag CA would accept (an unknown flag makes CA exit at start).

Sources: cluster-autoscaler `config/flags/flags.go` (release-1.36; the flags of the main loop, scale-up,
scale-down and the cloud provider), `main.go` (leader election through component-base's
`BindLeaderElectionFlags`), and `k8s.io/klog/v2` `klog.go` `InitFlags` (the logging flags CA's main
registers). Only flags that exist in every release from 1.33 to 1.36 are listed; a layout that needs
another one adds it here with its source.
"""

from __future__ import annotations

#: config/flags/flags.go
CA_FLAGS = frozenset(
    {
        "address", "balance-similar-node-groups", "balancing-ignore-label", "balancing-label",
        "cloud-config", "cloud-provider", "cluster-name", "cores-total", "enforce-node-group-min-size",
        "estimator", "expander", "expendable-pods-priority-cutoff", "gpu-total",
        "ignore-daemonsets-utilization", "ignore-mirror-pods-utilization", "kube-api-content-type",
        "kube-client-burst", "kube-client-qps", "kubeconfig", "kubernetes", "max-binpacking-time",
        "max-bulk-soft-taint-count", "max-bulk-soft-taint-time", "max-failing-time",
        "max-graceful-termination-sec", "max-inactivity", "max-node-provision-time", "max-nodes-total",
        "max-pod-eviction-time", "max-total-unready-percentage", "memory-total", "namespace",
        "new-pod-scale-up-delay", "node-deletion-batcher-interval", "node-deletion-delay-timeout",
        "node-group-auto-discovery", "nodes", "ok-total-unready-count", "parallel-scale-up", "profiling",
        "regional", "scale-down-candidates-pool-min-count", "scale-down-candidates-pool-ratio",
        "scale-down-delay-after-add", "scale-down-delay-after-delete", "scale-down-delay-after-failure",
        "scale-down-enabled", "scale-down-gpu-utilization-threshold", "scale-down-non-empty-candidates-count",
        "scale-down-unneeded-time", "scale-down-unready-enabled", "scale-down-unready-time",
        "scale-down-utilization-threshold", "scale-from-unschedulable", "scale-up-from-zero",
        "scan-interval", "startup-taint", "status-config-map-name", "status-taint",
        "unremovable-node-recheck-timeout", "write-status-configmap",
    }
)  # fmt: skip

#: main.go: component-base's leader election flags
LEADER_ELECTION_FLAGS = frozenset(
    {
        "leader-elect", "leader-elect-lease-duration", "leader-elect-renew-deadline",
        "leader-elect-retry-period", "leader-elect-resource-lock", "leader-elect-resource-name",
        "leader-elect-resource-namespace",
    }
)  # fmt: skip

#: k8s.io/klog/v2 InitFlags
KLOG_FLAGS = frozenset(
    {
        "add_dir_header", "alsologtostderr", "log_backtrace_at", "log_dir", "log_file",
        "log_file_max_size", "logtostderr", "one_output", "skip_headers", "skip_log_headers",
        "stderrthreshold", "v", "vmodule",
    }
)  # fmt: skip

#: every flag name CA 1.33-1.36 accepts on its command line (of those listed above)
DEFINED = CA_FLAGS | LEADER_ELECTION_FLAGS | KLOG_FLAGS
