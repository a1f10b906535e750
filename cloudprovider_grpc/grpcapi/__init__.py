"""The gRPC surface cluster-autoscaler calls: the server assembly and its shutdown (server.py), the
externalgrpc servicer (servicer.py) with the answers it keeps (answers.py, getoptions.py,
prebuilt.py), the raw-bytes handlers that parse requests and serve every caller (handlers.py,
rawparse.py), admission at shutdown (admission.py), the status and metrics of each RPC's outcome
(outcome.py), the wire conversions (wire.py), the standard health and reflection services
(health.py) and the malloc arena limit (memory.py). It may import every layer below it (providers,
ha, tls, observability, config, core, k8s, front); the command line and the simulator import it, and
of the layers below only the compiled front does, for the service name and the handlers' facts
(the version trailer, the cacheable methods)."""
