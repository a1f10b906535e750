"""The few types every layer shares: the clock backends and emulators run on, the errors that carry
a gRPC status, the facts of a cloud error, and the gRPC port as a unix socket (its address rules
and its file's life, shared by the settings, the server and the compiled front's supervisor). It
imports nothing else of the package."""
