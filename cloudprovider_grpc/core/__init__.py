"""The ground floor: what every other floor shares, importing nothing else of the package. The clock
backends and emulators run on, the errors that carry a gRPC status, the facts of a cloud error, the
gRPC port as a unix socket (its address rules and its file's life), `HOST:PORT` addresses and Go
durations read one way everywhere, secrets (read once, redacted from every log line), pydantic's
errors as the command line prints them, and the token bucket that paces cloud calls and emulators."""
