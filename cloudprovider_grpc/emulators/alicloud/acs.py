"""Pieces every part of the AliCloud emulator shares: API versions, bounds, the error envelope's
exception, small parsers and the access key record."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cloudprovider_grpc.emulators import HttpProblem

ESS_VERSIONS = ("2014-08-28", "2022-02-22")
ECS_VERSION = "2014-05-26"
VPC_VERSION = "2016-04-28"
STS_VERSION = "2015-04-01"
#: ±15 minutes (InvalidTimeStamp.Expired outside it: the vendor doc "V3 request structure and signature")
TIMESTAMP_WINDOW = 15 * 60
#: signature nonces remembered for replay detection, at most (the newest)
NONCES_KEPT = 10_000
#: finished scaling activities kept per group (the newest; one in progress is never dropped): ESS
#: keeps a group's history, but an emulator inside a long-running `serve --emulate` must not grow
#: with every scale, nor scan ever more activities on every request (`_tick`)
ACTIVITIES_KEPT = 100
#: ClientToken answers remembered for idempotent retries, at most (the newest; a retry comes
#: seconds after its first attempt)
CLIENT_TOKENS_KEPT = 1_000
REMOVABLE = frozenset({"InService", "Standby", "Stopped"})


class AcsError(HttpProblem):
    """An error in AliCloud's envelope."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(status, message, headers)
        self.code = code


#: status and message of each error the emulator answers with a fixed text (vendor wording where
#: public clients or docs quote it)
_MESSAGES: dict[str, tuple[int, str]] = {
    "AuthenticationFail.OIDCToken.Invalid": (400, "The OIDC token is invalid or expired."),
    "EntityNotExist.Role": (404, "The specified Role not exists."),
    "Forbidden.Unauthorized": (
        403,
        "A required authorization for the specified action is not supplied.",
    ),
    "IncompleteSignature": (400, "The request signature does not conform to Aliyun standards."),
    "IncorrectCapacity.MinSize": (
        400,
        "To remove the instances, the total capacity will be lesser than the min size.",
    ),
    "IncorrectScalingGroupStatus": (
        400,
        "The current status of the specified scaling group does not support this action.",
    ),
    "InvalidAccessKeyId.NotFound": (404, "Specified access key is not found."),
    "InvalidAction.NotFound": (
        404,
        "Specified api is not found, please check your url and method.",
    ),
    "InvalidNextToken": (400, "The specified NextToken is not valid."),
    "InvalidParameter.DurationSeconds": (400, "DurationSeconds must be an integer."),
    "InvalidScalingGroupId.NotFound": (404, "The specified scaling group does not exist."),
    "InvalidSecurityToken.Expired": (400, "Specified SecurityToken is expired."),
    "InvalidSecurityToken.MismatchWithAccessKey": (
        400,
        "Specified SecurityToken mismatch with the AccessKey.",
    ),
    "InvalidTimeStamp.Expired": (400, "Specified time stamp or date value is expired."),
    "InvalidTimeStamp.Format": (400, "Specified time stamp or date value is not well formatted."),
    "InvalidVersion": (400, "Specified parameter Version is not valid."),
    "MissingSignatureNonce": (400, "SignatureNonce is mandatory for this action."),
    "ScalingActivityInProgress": (
        400,
        "You cannot delete a scaling group or launch a new scaling activity while there is a scaling "
        "activity in progress for the specified scaling group.",
    ),
    "SignatureNonceUsed": (400, "Specified signature nonce was used already."),
}


def fail(code: str) -> AcsError:
    status, message = _MESSAGES[code]
    return AcsError(status, code, message)


def missing(name: str) -> AcsError:
    text = f'The input parameter "{name}" that is mandatory for processing this request is not supplied.'
    return AcsError(400, "MissingParameter", text)


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def minute_time(ts: float) -> str:
    # ESS timestamps in activity/instance records are minute-precision (vendor doc examples)
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%MZ")


def parse_time(value: str) -> float | None:
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise AcsError(400, "InvalidParameter", f"The specified parameter value {value!r} is not a boolean.")


def random_id(n: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(n))


@dataclass
class AccessKey:
    secret: str
    token: str = ""
    expires_at: float | None = None


#: an action's handler: (request parameters, API version) -> the answer's JSON body
Handler = Callable[[dict[str, str], str], dict[str, Any]]
