"""The service's configuration: flags, environment, secret files and the YAML file, merged and
validated (pydantic errors shown as the CLI prints them), and the secrets read from them. It may
import core; settings.py also reads tls/files.py (certificate files are checked when they are
read) and providers/registry.py (the backends a setting may name)."""
