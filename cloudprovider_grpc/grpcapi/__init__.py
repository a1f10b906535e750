"""The gRPC surface cluster-autoscaler calls: the server assembly, the externalgrpc servicer, the
raw-bytes request parsing and wire conversions, the answers encoded once, and the standard health
and reflection services. It may import every layer below it (providers, ha, tls, observability,
config, core); nothing below imports it."""
