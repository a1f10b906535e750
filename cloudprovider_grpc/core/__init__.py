"""The few types every layer shares: the clock backends and emulators run on, the errors that carry
a gRPC status, and the facts of a cloud error. It imports nothing else of the package."""
