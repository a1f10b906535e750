"""Where the AccessKey that signs our requests comes from: the three modes of the in-tree provider.

- AK/SK: `ACCESS_KEY_ID`/`ACCESS_KEY_SECRET`, used as they are.
- RRSA (OIDC): the service account token file is exchanged for a temporary key with STS
  `AssumeRoleWithOIDC` (version 2015-04-01, anonymous: the OIDC token is the proof). Parameters go
  in the query string as the vendor's own credential library and STS SDK send them
  (alibabacloud_credentials/provider/oidc.py); the token file is re-read on every exchange because
  kubelet rotates it.
- ECS RAM role: the instance metadata server names the role
  (`/latest/meta-data/ram/security-credentials/`) and hands out its temporary key
  (`/latest/meta-data/Ram/security-credentials/<role>`, capital R as the in-tree client asks);
  `METADATA_ENDPOINT` overrides `http://100.100.100.200` (in-tree metadata/metadata.go).

The mode is chosen from the configuration's inputs as in-tree, the first complete one winning
(`choose_credentials`); stricter than in-tree, a mode given in part is an error naming the missing
variable.

Temporary keys are refreshed before they expire (when less than a quarter of their lifetime, at
most 5 minutes, is left) and on demand when the cloud says a key is stale. All of this runs only
where the client runs: in Refresh and the background workers, never in a read RPC.
"""

from __future__ import annotations

import abc
import calendar
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from cloudprovider_grpc.core import secrets
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.http import HttpClient, RetryPolicy, SecretAuth
from cloudprovider_grpc.providers.alicloud.errors import ApiError

log = logging.getLogger(__name__)

STS_VERSION = "2015-04-01"
DEFAULT_METADATA_ENDPOINT = "http://100.100.100.200"
#: longest head start a refresh takes before expiry
MAX_REFRESH_MARGIN = 300.0
#: session length asked of STS (its documented default; minimum 900 s)
DEFAULT_SESSION_SECONDS = 3600


@dataclass(frozen=True)
class Credential:
    """One AccessKey; `security_token` and `expires_at` (epoch seconds) for temporary keys."""

    access_key_id: str
    access_key_secret: str = field(repr=False)
    security_token: str = field(default="", repr=False)
    expires_at: float | None = None
    issued_at: float | None = None

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.access_key_secret, self.security_token) if s)


def parse_expiration(value: str) -> float:
    """`YYYY-MM-DDThh:mm:ssZ` (STS and the metadata server) as epoch seconds."""
    try:
        return float(calendar.timegm(time.strptime(value.strip(), "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, AttributeError):
        raise CloudError(f"alicloud credentials: bad Expiration {value!r}", transient=True) from None


class CredentialSource(abc.ABC):
    """Base: thread-safe, caches a temporary key until it is due for refresh."""

    mode = "static"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._current: Credential | None = None
        #: every secret ever handed out (for redaction of late log lines)
        self._seen: list[str] = []

    def get(self, force_refresh: bool = False) -> Credential:
        with self._lock:
            cur = self._current
            if cur is None or force_refresh or self._due(cur):
                cur = self._fetch()
                self._current = cur
                for secret in cur.secrets():
                    secrets.register(secret)  # masked in every log line from now on
                self._seen.extend(cur.secrets())
                del self._seen[:-8]
            return cur

    def _due(self, cred: Credential) -> bool:
        if cred.expires_at is None:
            return False
        issued = cred.issued_at if cred.issued_at is not None else cred.expires_at - DEFAULT_SESSION_SECONDS
        margin = min(MAX_REFRESH_MARGIN, max(0.0, cred.expires_at - issued) / 4)
        return self._clock() >= cred.expires_at - margin

    @abc.abstractmethod
    def _fetch(self) -> Credential:
        """A fresh credential from this source (STS, the metadata server, ...)."""

    @property
    def temporary(self) -> bool:
        return False

    def redact(self, text: str) -> str:
        for secret in self._seen:
            text = text.replace(secret, "***")
        return text

    def region(self) -> str:
        """The region this source knows of (the metadata server's), or ""."""
        return ""

    def close(self) -> None:
        return None


class StaticCredentials(CredentialSource):
    mode = "access-key"

    def __init__(self, access_key_id: str, access_key_secret: str) -> None:
        super().__init__()
        self._cred = Credential(access_key_id, access_key_secret)

    def _fetch(self) -> Credential:
        return self._cred


class _Redactor(SecretAuth):
    """Adds nothing to a request; scrubs what the source handed out from HTTP-layer messages."""

    def __init__(self, source: CredentialSource) -> None:
        super().__init__("")
        self._source = source

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return r

    def redact(self, text: str) -> str:
        return self._source.redact(text)


class OidcCredentials(CredentialSource):
    """RRSA: AssumeRoleWithOIDC with the projected service account token."""

    mode = "rrsa"

    def __init__(
        self,
        sts_url: str,
        *,
        role_arn: str,
        oidc_provider_arn: str,
        token_file: Path,
        session_name: str,
        duration: int = DEFAULT_SESSION_SECONDS,
        timeout: tuple[float, float] = (3.05, 10.0),
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        self.role_arn = role_arn
        self.oidc_provider_arn = oidc_provider_arn
        self.token_file = token_file
        self.session_name = session_name
        self.duration = duration
        # AssumeRoleWithOIDC changes nothing, so it is retried like a read (GET is not offered:
        # the vendor clients POST it); the HTTP layer retries connection failures it never sent.
        self.http = HttpClient(
            "alicloud-sts",
            sts_url,
            auth=_Redactor(self),
            timeout=timeout,
            retry=RetryPolicy(retries=2),
            max_elapsed=8.0,
        )

    @property
    def temporary(self) -> bool:
        return True

    def _fetch(self) -> Credential:
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise CloudError(
                f"alicloud rrsa: cannot read the OIDC token file {self.token_file}: {exc.strerror or exc}",
                transient=True,
            ) from None
        if not token:
            raise CloudError(f"alicloud rrsa: the OIDC token file {self.token_file} is empty", transient=True)
        self._seen.append(token)
        secrets.register(token)
        params = {
            "Action": "AssumeRoleWithOIDC",
            "Version": STS_VERSION,
            "Format": "JSON",
            "Timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "SignatureNonce": uuid.uuid4().hex,
            "RoleArn": self.role_arn,
            "OIDCProviderArn": self.oidc_provider_arn,
            "OIDCToken": token,
            "RoleSessionName": self.session_name,
            "DurationSeconds": str(self.duration),
        }
        reply = self.http.request(
            "POST", "/", operation="AssumeRoleWithOIDC", params=params, ok=range(100, 600), urgent=True
        )
        if reply.status != 200:
            err = ApiError.from_reply(reply.status, reply.body, reply.headers)
            raise err.to_cloud_error("alicloud sts AssumeRoleWithOIDC")
        data = reply.json() or {}
        creds = data.get("Credentials") if isinstance(data, dict) else None
        if not isinstance(creds, dict) or not all(
            creds.get(k) for k in ("AccessKeyId", "AccessKeySecret", "SecurityToken", "Expiration")
        ):
            raise CloudError(
                "alicloud sts AssumeRoleWithOIDC: the answer carries no credentials", transient=True
            )
        log.info("alicloud rrsa: assumed role %s, key valid until %s", self.role_arn, creds["Expiration"])
        return Credential(
            str(creds["AccessKeyId"]),
            str(creds["AccessKeySecret"]),
            str(creds["SecurityToken"]),
            parse_expiration(str(creds["Expiration"])),
            issued_at=self._clock(),
        )

    def close(self) -> None:
        self.http.close()


class MetadataCredentials(CredentialSource):
    """ECS RAM role credentials from the instance metadata server."""

    mode = "ecs-ram-role"

    def __init__(
        self,
        endpoint: str = DEFAULT_METADATA_ENDPOINT,
        *,
        timeout: tuple[float, float] = (1.0, 5.0),
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock)
        # in-tree retries metadata calls on network errors only, for about 5 s (metadata.go)
        self.http = HttpClient(
            "alicloud-metadata",
            endpoint,
            auth=_Redactor(self),
            timeout=timeout,
            retry=RetryPolicy(retries=4, base_backoff=0.2, max_backoff=1.0),
            max_elapsed=5.0,
        )
        self._role = ""
        self._region = ""

    @property
    def temporary(self) -> bool:
        return True

    def _text(self, path: str, operation: str) -> str:
        reply = self.http.request("GET", path, operation=operation, urgent=True)
        return reply.body.decode("utf-8", "replace").strip()

    def role(self) -> str:
        if not self._role:
            names = self._text("latest/meta-data/ram/security-credentials/", "metadata_role").splitlines()
            if not names or not names[0].strip():
                raise CloudError("alicloud metadata: this instance has no RAM role attached")
            self._role = names[0].strip()
        return self._role

    def region(self) -> str:
        if not self._region:
            self._region = self._text("latest/meta-data/region-id", "metadata_region")
        return self._region

    def _fetch(self) -> Credential:
        role = self.role()
        reply = self.http.request(
            "GET", f"latest/meta-data/Ram/security-credentials/{role}", operation="metadata_credentials"
        )
        data = reply.json() or {}
        if not isinstance(data, dict) or data.get("Code", "Success") != "Success":
            raise CloudError(f"alicloud metadata: role {role!r} credentials unavailable", transient=True)
        if not all(data.get(k) for k in ("AccessKeyId", "AccessKeySecret", "SecurityToken", "Expiration")):
            raise CloudError("alicloud metadata: the answer carries no credentials", transient=True)
        return Credential(
            str(data["AccessKeyId"]),
            str(data["AccessKeySecret"]),
            str(data["SecurityToken"]),
            parse_expiration(str(data["Expiration"])),
            issued_at=self._clock(),
        )

    def close(self) -> None:
        self.http.close()


# The mode chosen from the configuration's inputs (config.py's model supplies each input with the
# name it was read under: a variable, or the cloud-config file's key, which its problem names).

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
    registered so no log line, status message or metric can carry it (cloudprovider_grpc.core.secrets)."""
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
