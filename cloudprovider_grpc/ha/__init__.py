"""High availability: several replicas, one leader on a coordination.k8s.io/v1 Lease. The election,
the Lease itself, the leadership term as a write gate, the caller-side hand-over and the role
written on the pod. It may import config, core, tls and the machinery's write gate it implements
(providers/machinery/gate.py); never the gRPC surface."""
