"""The server's TLS files and their settings: loaded and checked at start, re-read when they change.
It imports only core."""
