"""AliCloud's credential modes, chosen from the inputs as in-tree: the first complete mode wins,
AccessKey (`ACCESS_KEY_ID`, `ACCESS_KEY_SECRET`), then RRSA (the OIDC provider, its token file, the
role and a session name), then the ECS RAM role from the metadata server. Stricter than in-tree: a
mode given in part is an error naming the missing variable. Every input is given with the name it
was read under (a variable, or the cloud-config file's key), which its problem names; config.py's
model supplies them. The credentials in use at runtime are credentials.py's."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cloudprovider_grpc.config import secrets
from cloudprovider_grpc.core.errors import ConfigError

#: the AccessKey used with --emulate when no credentials are given
EMULATOR_ACCESS_KEY_ID = "LTAI5tEmulatorAccessKey"
EMULATOR_ACCESS_KEY_SECRET = "emulator-access-key-secret"
#: (new name, old name) of each RRSA variable (in-tree alicloud_cloud_config.go)
RRSA_VARS = {
    "oidc_provider_arn": ("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALICLOUD_OIDC_PROVIDER_ARN"),
    "oidc_token_file": ("ALIBABA_CLOUD_OIDC_TOKEN_FILE", "ALICLOUD_OIDC_TOKEN_FILE_PATH"),
    "role_arn": ("ALIBABA_CLOUD_ROLE_ARN", "ALICLOUD_ROLE_ARN"),
    "session_name": ("ALIBABA_CLOUD_SESSION_NAME", "ALICLOUD_SESSION_NAME"),
}
_ARN_RE = re.compile(r"^acs:ram::[0-9A-Za-z]+:[a-z\-]+/.+$")


@dataclass(frozen=True)
class Credentials:
    """The credential mode and its inputs (secrets never in the repr)."""

    mode: str  # "access-key" | "rrsa" | "ecs-ram-role"
    access_key_id: str = ""
    access_key_secret: str = field(default="", repr=False)
    oidc_provider_arn: str = ""
    oidc_token_file: Path | None = None
    role_arn: str = ""
    session_name: str = ""
    #: where each input came from, for messages
    source: str = ""


def secret_input(value: str, key: str) -> str:
    """Stripped of surrounding whitespace (a Secret file's trailing newline), header-safe, and
    registered so no log line, status message or metric can carry it (cloudprovider_grpc.config.secrets)."""
    secrets.register(value)
    value = value.strip()
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ConfigError(key, "contains control characters (a line break inside the value?)")
    if not value.isascii():
        raise ConfigError(key, "contains non-ASCII characters")
    return value


def choose_credentials(pick: Callable[[str], tuple[str, str]], emulate: bool) -> Credentials:
    """The first complete credential mode: (value, where it was given) of each input from `pick`."""
    ak, ak_key = pick("access_key_id")
    sk, sk_key = pick("access_key_secret")
    if ak.strip() or sk.strip():
        if not ak.strip():
            raise ConfigError("ACCESS_KEY_ID", "missing (ACCESS_KEY_SECRET is set)")
        if not sk.strip():
            raise ConfigError("ACCESS_KEY_SECRET", "missing (ACCESS_KEY_ID is set)")
        return Credentials(
            "access-key", secret_input(ak, ak_key), secret_input(sk, sk_key), source=f"{ak_key}/{sk_key}"
        )
    rrsa = {fld: pick(fld) for fld in RRSA_VARS}
    given = [fld for fld, (value, _) in rrsa.items() if value.strip()]
    if given:
        missing = [RRSA_VARS[f][0] for f in RRSA_VARS if f not in given]
        if missing:
            raise ConfigError(
                missing[0], f"missing: RRSA needs all of {', '.join(v[0] for v in RRSA_VARS.values())}"
            )
        arn, arn_key = rrsa["oidc_provider_arn"]
        role, role_key = rrsa["role_arn"]
        for value, key in ((arn, arn_key), (role, role_key)):
            if not _ARN_RE.match(value.strip()):
                raise ConfigError(key, f"{value.strip()!r} is not an ARN (acs:ram::<account>:<type>/<name>)")
        token_file, token_key = rrsa["oidc_token_file"]
        path = Path(token_file.strip())
        if not emulate and not path.is_file():
            raise ConfigError(token_key, f"{str(path)!r} is not a file (the projected service account token)")
        session, session_key = rrsa["session_name"]
        session = secret_input(session, session_key)
        if not re.fullmatch(r"[\w.@-]{2,64}", session):
            raise ConfigError(session_key, f"{session!r}: 2-64 letters, digits, '.', '@', '-', '_'")
        return Credentials(
            "rrsa",
            oidc_provider_arn=arn.strip(),
            oidc_token_file=path,
            role_arn=role.strip(),
            session_name=session,
            source="RRSA environment",
        )
    if emulate:
        return Credentials(
            "access-key", EMULATOR_ACCESS_KEY_ID, EMULATOR_ACCESS_KEY_SECRET, source="emulator default"
        )
    return Credentials("ecs-ram-role", source="ECS metadata server")
