"""Service configuration: command-line flags > environment > secret files > YAML file > defaults.

Environment variables use the prefix CLOUDPROVIDER_GRPC_ (nested with "__", e.g.
CLOUDPROVIDER_GRPC_TLS__CERT). The YAML file (`--config` or CLOUDPROVIDER_GRPC_CONFIG) holds the
same keys; a top-level section named after a backend (`sim:`, `cherry:`) is that backend's own
configuration. A secrets directory (CLOUDPROVIDER_GRPC_SECRETS_DIR, e.g. a mounted Kubernetes
Secret) provides one file per setting, named like its environment variable; its files are also
offered to backends as environment variables (so `CHERRY_AUTH_TOKEN` can be a file). Every
validation failure is reported as a ConfigError naming the offending key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from cloudprovider_grpc.core import unixsocket
from cloudprovider_grpc.core.addresses import is_loopback
from cloudprovider_grpc.core.errors import ConfigError, raise_all
from cloudprovider_grpc.core.pydantic_errors import problems
from cloudprovider_grpc.core.secrets import register_environment
from cloudprovider_grpc.ha.settings import LeaderElection
from cloudprovider_grpc.providers.group_options import GroupOptions
from cloudprovider_grpc.providers.registry import BACKENDS, NodesSpec, ProviderContext
from cloudprovider_grpc.tls.settings import TLSSettings

ENV_PREFIX = "CLOUDPROVIDER_GRPC_"
_ADDRESS_RE = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]*):(?P<port>\d{1,5})$")


#: the YAML file's contents while load_settings() builds Settings (settings load once, at startup)
_yaml_data: dict[str, Any] = {}


def yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    """`FILE:LINE:COLUMN: problem` for a YAML syntax error, on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return f"{path} is not valid YAML: {problem}"
    return f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}"


class _YamlFile(PydanticBaseSettingsSource):
    """The YAML config file chosen at run time (pydantic's YAML source only takes a static path)."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = dict(data)

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._data


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", secrets_dir=None
    )

    provider: str = "sim"
    #: loopback by default: the gRPC port creates and deletes machines, so serving it beyond the host
    #: in plaintext must be asked for (`allow_plaintext`); manifests give their addresses explicitly
    address: str = "127.0.0.1:8086"
    #: the socket file's mode when `address` is a unix socket (core/unixsocket.py); octal text or int
    socket_mode: int = unixsocket.DEFAULT_MODE
    metrics_address: str = "127.0.0.1:8087"
    allow_plaintext: bool = False
    nodes: list[str] = Field(default_factory=list)
    cloud_config: Path | None = None
    cluster_name: str | None = None
    emulate: bool = False
    tls: TLSSettings = Field(default_factory=TLSSettings)
    state_file: Path | None = None
    concurrency: int = Field(10, ge=1, le=100)
    grpc_workers: int = Field(16, ge=1, le=256)
    grace_period: float = Field(10.0, ge=0)
    #: the compiled front for the per-node read RPCs (cloudprovider_grpc/front): auto = use it when
    #: its binary is there, on = refuse to start without it, off = Python serves the port alone
    front: Literal["auto", "on", "off"] = "auto"
    #: the front's executable; default: the build of `cloudprovider-grpc build-front` in the user cache
    front_binary: Path | None = None
    #: list the cloud and answer CA, never write to the cloud (providers/machinery/gate.py DryRunGate)
    dry_run: bool = False
    #: leader election on a coordination.k8s.io/v1 Lease (cloudprovider_grpc/ha/election.py), with
    #: cluster-autoscaler's flag names and defaults
    leader_elect: LeaderElection = Field(default_factory=LeaderElection)
    #: write the status ConfigMap and record Kubernetes Events (kubereport.py); needs API access: the
    #: pod's service account, or leader_elect.kubeconfig
    kube_status: bool = False
    #: the namespace of the status ConfigMap and its Events; empty: the pod's own
    kube_status_namespace: str = ""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    secrets_dir: Path | None = None
    #: per-group autoscaling options for every backend: node group id or name -> option -> value
    #: (providers/group_options.py)
    group_options: dict[str, dict[str, float | bool]] = Field(default_factory=dict)
    #: backend sections of the YAML file, by backend name
    backends: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, file_secret_settings, _YamlFile(settings_cls, _yaml_data))

    @model_validator(mode="before")
    @classmethod
    def _backend_sections(cls, data: Any) -> Any:
        if isinstance(data, dict):
            sections = {k: data.pop(k) for k in list(data) if k in BACKENDS}
            if sections:
                merged = dict(data.get("backends") or {})
                merged.update(sections)
                data["backends"] = merged
        return data

    @field_validator("provider")
    @classmethod
    def _provider(cls, v: str) -> str:
        if v not in BACKENDS:
            raise ValueError(f"unknown provider {v!r} (known: {', '.join(sorted(BACKENDS))})")
        return v

    @field_validator("address", "metrics_address")
    @classmethod
    def _address(cls, v: str, info: Any) -> str:
        if v == "" and info.field_name == "metrics_address":
            return v  # metrics and /healthz disabled
        if info.field_name == "address" and unixsocket.is_unix(v):
            unixsocket.socket_path(v)  # a ValueError names what CA could not dial
            return v
        m = _ADDRESS_RE.match(v)
        if not m or not 0 <= int(m.group("port")) <= 65535:
            examples = ":8086, 127.0.0.1:8086, [::1]:8086"
            if info.field_name == "address":
                examples += f", {unixsocket.EXAMPLE}"
            raise ValueError(f"{v!r} is not HOST:PORT (e.g. {examples})")
        return v

    @field_validator("socket_mode", mode="before")
    @classmethod
    def _socket_mode(cls, v: Any) -> int:
        """Octal text as chmod takes it ("0660", "660", "0o600"), or an int."""
        if isinstance(v, str):
            text = v.strip().lower().removeprefix("0o")
            if not re.fullmatch(r"[0-7]{1,4}", text):
                raise ValueError(f"{v!r} is not an octal file mode (e.g. 0660)")
            v = int(text, 8)
        if not isinstance(v, int) or not 0 <= v <= 0o777:
            raise ValueError(f"{v!r} is not a file mode between 0000 and 0777")
        if not v & 0o600 == 0o600:
            raise ValueError(f"{v:04o} leaves the server's own user unable to use its socket (needs 06xx)")
        return v

    @property
    def unix_socket(self) -> Path | None:
        """The socket's path when the gRPC address is a unix socket, else None."""
        return unixsocket.socket_path(self.address) if unixsocket.is_unix(self.address) else None

    @model_validator(mode="after")
    def _dry_run_alone(self) -> Settings:
        if self.dry_run and self.leader_elect.enabled:
            raise ConfigError(
                "dry_run", "a dry run writes nothing and needs no leader: give --dry-run or --leader-elect"
            )
        return self

    @model_validator(mode="after")
    def _socket_alone(self) -> Settings:
        if self.unix_socket is not None and self.leader_elect.enabled:
            raise ConfigError(
                "address",
                "a unix socket is reachable from this pod only, and leader election hands calls over "
                "to the other replicas' gRPC ports: give a TCP address with --leader-elect",
            )
        return self

    @model_validator(mode="after")
    def _plaintext_beyond_loopback(self) -> Settings:
        if self.unix_socket is not None:
            return self  # only processes that see the socket file, within its mode, can call
        if not self.tls.enabled and not is_loopback(self.address) and not self.allow_plaintext:
            raise ConfigError(
                "address",
                f"{self.address} is reachable beyond this host and TLS is off, so anyone who can "
                "reach it could create and delete machines; give --tls-cert/--tls-key, a loopback address "
                "(127.0.0.1:8086), or --allow-plaintext to accept that",
            )
        return self

    @field_validator("group_options", mode="before")
    @classmethod
    def _group_options(cls, v: Any) -> dict[str, dict[str, float | bool]]:
        """Validated here, every problem at once, each naming `group_options.<group>.<option>`."""
        return {ref: dict(options) for ref, options in GroupOptions.read(v).by_ref.items()}

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: list[str]) -> list[str]:
        for item in v:
            NodesSpec.parse(item)
        return v

    @field_validator("cloud_config", "secrets_dir")
    @classmethod
    def _exists(cls, v: Path | None) -> Path | None:
        if v is not None and not v.exists():
            raise ValueError(f"{str(v)!r} does not exist")
        return v

    def provider_context(self, env: Mapping[str, str] | None = None, **overrides: Any) -> ProviderContext:
        environ = dict(os.environ if env is None else env)
        if self.secrets_dir is not None:
            files: dict[str, str] = {}
            for f in sorted(self.secrets_dir.iterdir()):
                if f.is_file() and not f.name.startswith("."):
                    try:
                        files[f.name] = f.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError) as exc:
                        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
                        raise ConfigError("secrets_dir", f"cannot read {f}: {reason}") from None
            register_environment(files)
            for name, value in files.items():  # backends also check them (secrets.read_secret)
                environ.setdefault(name, value.strip())
        fields: dict[str, Any] = {
            "nodes": tuple(NodesSpec.parse(n) for n in self.nodes),
            "options": self.backends.get(self.provider, {}),
            "cloud_config": self.cloud_config,
            "cluster_name": self.cluster_name,
            "emulate": self.emulate,
            "state_file": self.state_file,
            "concurrency": self.concurrency,
            "env": environ,
            "group_options": GroupOptions(self.group_options),
        }
        fields.update(overrides)
        return ProviderContext(**fields)


def load_settings(config_file: Path | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from all sources; raises ConfigError naming the first offending key."""
    environ = os.environ
    path = config_file or (
        Path(environ[f"{ENV_PREFIX}CONFIG"]) if environ.get(f"{ENV_PREFIX}CONFIG") else None
    )
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError("config", f"file {str(path)!r} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError("config", yaml_problem(path, exc)) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("config", f"{path} must hold a mapping of settings")
        data = loaded or {}
    secrets_dir = environ.get(f"{ENV_PREFIX}SECRETS_DIR")
    init = {k: v for k, v in (overrides or {}).items() if v is not None}
    _yaml_data.clear()
    _yaml_data.update(data)
    try:
        kwargs: dict[str, Any] = {}
        if secrets_dir:
            kwargs["_secrets_dir"] = secrets_dir
        return Settings(**init, **kwargs)
    except ValidationError as exc:
        # every problem at once, an unknown key with the nearest known one
        raise_all(problems(exc, Settings, extra_keys=BACKENDS))
        raise  # unreachable: a ValidationError has at least one error
    finally:
        _yaml_data.clear()
