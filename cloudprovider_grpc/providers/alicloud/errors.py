"""Alibaba Cloud's error envelope turned into precise `CloudError`s.

Every product answers errors as JSON `{"RequestId", "HostId", "Code", "Message", "Recommend"}`
(the vendor's API references; the Tea SDK, alibabacloud-tea-openapi 0.4.6). What we decide from the `Code`:
- throttling (`Throttling`, `Throttling.User`, `Throttling.Api`, any `Throttling.*`): refused before
  processing, so any call may be sent again, after `x-acs-retry-after` milliseconds when the answer
  has that header (the Tea SDK reads it as a delay it sleeps in milliseconds, darabonba/core.py);
- `ServiceUnavailable`, `InternalError` and any 5xx: transient; only reads are re-sent at once;
- `ScalingActivityInProgress`, `IncorrectScalingGroupStatus`: transient for the machinery (it retries
  in the background), never retried inside a call;
- stock and quota codes (`OperationDenied.NoStock`, `*.NoStock`, `QuotaExceed*`, `*.QuotaExceeded`,
  `InvalidResourceType.NotSupported` ...): class 1 (OUT_OF_RESOURCES), so CA backs the group off;
- an expired or unknown temporary credential: the client fetches a new one and sends once more.
The vendor's `SignatureDoesNotMatch` message quotes the server's string to sign; we keep only the
first sentence so no request detail reaches logs or CA.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass

_THROTTLING_RE = re.compile(r"^Throttling(\..+)?$")
#: stock-out and quota codes of ECS RunInstances as ESS reports them on failed scale-outs, and ESS's
#: own capacity quota codes (vendor error-code pages; any code naming stock or quota counts)
_OUT_OF_RESOURCES_RE = re.compile(
    r"NoStock|OutOfStock|Stock\.|QuotaExceed|QuotaExceeded|Quota\.|ResourceNotAvailable"
    r"|InvalidResourceType\.NotSupported|InsufficientCapacity",
    re.I,
)
_TRANSIENT_CODES = frozenset(
    {"ServiceUnavailable", "InternalError", "ScalingActivityInProgress", "IncorrectScalingGroupStatus"}
)
#: codes that mean our temporary credential is stale: fetch a new one and send once more
STALE_CREDENTIAL_CODES = frozenset(
    {
        "InvalidSecurityToken.Expired",
        "InvalidSecurityToken.Malformed",
        "InvalidSecurityToken.MismatchWithAccessKey",
        "InvalidAccessKeyId.NotFound",
    }
)
_MAX_MESSAGE = 300


def is_throttling(code: str) -> bool:
    return bool(_THROTTLING_RE.match(code))


def is_out_of_resources(code: str) -> bool:
    return bool(code) and bool(_OUT_OF_RESOURCES_RE.search(code))


def error_class(code: str) -> ErrorClass:
    return ErrorClass.OUT_OF_RESOURCES if is_out_of_resources(code) else ErrorClass.OTHER


def clean_message(message: str) -> str:
    """One line, without the quoted string to sign, at most a few hundred characters."""
    text = " ".join(str(message).split())
    cut = text.find("server string to sign is")
    if cut >= 0:
        text = text[:cut].rstrip(" :.,") + "."
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "..."


@dataclass(frozen=True)
class ApiError:
    """The decoded envelope of one failed answer."""

    status: int
    code: str
    message: str
    request_id: str = ""
    #: seconds the server asked us to wait (x-acs-retry-after), if it said
    retry_after: float | None = None

    @classmethod
    def from_reply(cls, status: int, body: bytes, headers: Mapping[str, str]) -> ApiError:
        code, message, request_id = "", "", ""
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        if isinstance(data, dict):
            code = str(data.get("Code") or data.get("code") or "")
            message = str(data.get("Message") or data.get("message") or "")
            request_id = str(data.get("RequestId") or "")
        if not code:
            code = f"HTTP{status}"
            message = message or " ".join(body.decode("utf-8", "replace").split())[:200] or "(empty body)"
        retry_after = None
        raw = headers.get("x-acs-retry-after")
        if raw and raw.strip().isdigit() and int(raw) > 0:
            retry_after = int(raw) / 1000.0
        return cls(status, code, clean_message(message), request_id, retry_after)

    @property
    def throttled(self) -> bool:
        return is_throttling(self.code) or self.status == 429

    @property
    def transient(self) -> bool:
        return self.throttled or self.status >= 500 or self.code in _TRANSIENT_CODES

    @property
    def stale_credential(self) -> bool:
        return self.code in STALE_CREDENTIAL_CODES

    def to_cloud_error(self, where: str) -> CloudError:
        rid = f" (RequestId {self.request_id})" if self.request_id else ""
        return CloudError(
            f"{where}: {self.code}: {self.message}{rid}",
            transient=self.transient,
            error_class=error_class(self.code),
            code=self.code,
            status=self.status,
        )
