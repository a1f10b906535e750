"""The server's TLS files: loaded and checked at start, re-read when they change. It may import
config and core only."""
