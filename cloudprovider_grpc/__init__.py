"""cloudprovider-grpc: cluster-autoscaler's externalgrpc cloud provider, in Python."""

__version__ = "0.2.0"
