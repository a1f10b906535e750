"""The real cluster-autoscaler against a real control plane, with our server as its cloud provider.

A library as much as a test package: `builds` (cached Go builds of CA, its externalgrpc client
harness, the control plane, and etcd), `cluster` (etcd, kube-apiserver, scheduler and
controller-manager on loopback, plus the registrar that stands in for kubelets), `autoscaler`
(starting CA with flags, reading its log, status ConfigMap and metrics). benchmarks can drive CA
through the same calls as the tests.
"""
