"""The cloud backends: the contract the gRPC surface calls (`contract.py`), the shared machinery in its
two shapes (machines: we own the size; pools: the cloud does), the registry that loads a cloud by
name, and one folder per cloud (client, config, driver, wiring). It imports the floors below it:
`emulators/<a cloud>` (from that cloud's folder only), `formats/`, `http/`, `k8s/`,
`observability/` and `core/`; never another cloud, and nothing outside this folder imports a cloud
but `registry.py`."""
