"""The machine shape: the server owns each group's size and creates machines one by one, each with a
creation token (Cherry Servers, StackPointCloud, the `sim` cloud). `provider.py` is `MachineProvider`
and its RPCs; `core.py` the per-group state; `workers.py` the background creates and deletes;
`listing.py` how a cloud listing is folded in; `shape.py` the hooks the group core calls and the
journal's format. Each is an object the provider holds, handed what it uses."""
