"""The service's configuration: flags, environment, secret files and the YAML file, merged and
validated (pydantic errors shown as the CLI prints them), and the secrets read from them. It may
import core only."""
