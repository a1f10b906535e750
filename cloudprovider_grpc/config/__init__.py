"""The service's configuration: flags, environment, secret files and the YAML file, merged and
validated into one `Settings`. It sits above the parts it configures and holds their own settings
as fields: the TLS files (`tls/settings.py`), leader election (`ha/settings.py`) and the backends a
setting may name (`providers/registry.py`). The server and the command line read it."""
