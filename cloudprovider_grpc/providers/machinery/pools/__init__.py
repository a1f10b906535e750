"""The pool shape: the cloud owns each group's desired size; the server sets absolute sizes and names
the machines to remove (Vultr VKE, Exoscale, AliCloud ESS, the `sim` cloud with `shape: pools`).
`provider.py` is `PoolProvider` and its RPCs; `core.py` the per-group state and placeholders; `sync.py`
the coalescing sync job; `operations.py` the polling of the cloud's asynchronous operations;
`listing.py` how a cloud listing is folded in; `shape.py` the hooks the group core calls and the
journal's format. Each is an object the provider holds, handed what it uses."""
