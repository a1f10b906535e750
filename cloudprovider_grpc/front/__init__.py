"""The compiled front: `cpg-front`, a small grpc-go program whose sources sit in this
directory, owns the public gRPC port, answers NodeGroupGetOptions, NodeGroupForNode and
NodeGroupTargetSize from a cache of Python's own answers (valid for one provider state version) and
relays every other call to the Python server on a private unix socket.

- `binary`: where the executable comes from (`cloudprovider-grpc build-front`, a path setting);
- `process`: the child process and its JSON-lines control channel;
- `counters`: the shared file in which the front counts the calls it answers (for /metrics).
"""
