"""The whole server, assembled: the gRPC port with its TLS, health and shutdown, the compiled front or
grpcio serving it, leader election and hand-over (assembly.py), the metrics and probe port
(metrics_port.py), the /status page (status.py) and the status ConfigMap with its Kubernetes Events
(kubereport.py). It is the one folder that sees every part at once, so it sits above them all: the
gRPC surface, the front, high availability, observability, the configuration and the providers. Only
the simulator and the command line import it."""
