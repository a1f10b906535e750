"""The commands besides `serve`: `check-config`, and `groups`, `nodes`, `scale`, `delete`,
`options`, `template`, which look into a running server. `cli.py` parses the command line and
dispatches here."""
