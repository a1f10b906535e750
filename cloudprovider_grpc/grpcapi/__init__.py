"""The gRPC surface cluster-autoscaler calls: the externalgrpc servicer (servicer.py) with the answers
it keeps (answers.py, getoptions.py, prebuilt.py), the raw-bytes handlers that parse requests and
serve every caller (handlers.py, rawparse.py), admission at shutdown (admission.py), the status
and metrics of each RPC's outcome (outcome.py), the wire conversions (wire.py), the standard health
and reflection services (health.py) and the malloc arena limit (memory.py). It imports the providers'
contract, the hand-over relay (ha/), observability, k8s, the generated code and core; the compiled
front, the server assembly (server/), the simulator and the command line build on it."""
