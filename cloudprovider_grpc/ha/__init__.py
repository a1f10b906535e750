"""High availability: several replicas, one leader on a coordination.k8s.io/v1 Lease. The election,
its settings (settings.py), the Lease itself, the leadership term as a write gate, the caller-side
hand-over and the role written on the pod. It imports the machinery's write gate it implements
(providers/machinery/gate.py), the TLS files the hand-over dials with (tls/) and core; the gRPC
surface, the configuration and the server assembly build on it."""
