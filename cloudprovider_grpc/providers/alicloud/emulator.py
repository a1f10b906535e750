"""An AliCloud API emulator served over real HTTP, shipped with the product: ESS (API versions
2014-08-28 and 2022-02-22), ECS DescribeInstanceTypes (2014-05-26), STS AssumeRoleWithOIDC
(2015-04-01) and the ECS metadata server's RAM-role paths, all on one port.

What it reproduces (research alicloud.md §5, vendor API references, the Tea SDK's models):
- RPC routing on `/` (GET or POST) by `Action`/`Version` (query or form body) or the V3 headers
  `x-acs-action`/`x-acs-version`; unknown action `InvalidAction.NotFound`, bad version
  `InvalidVersion`;
- signatures V1 (HMAC-SHA1) and V3 (ACS3-HMAC-SHA256) verified over the request as sent, with
  nonce reuse (`SignatureNonceUsed`) and the ±15 minute timestamp window (`InvalidTimeStamp.Expired`),
  unknown keys (`InvalidAccessKeyId.NotFound`), temporary keys needing their `SecurityToken`
  (`InvalidSecurityToken.*`), all in the JSON error envelope `{RequestId, HostId, Code, Message,
  Recommend}`;
- scaling groups whose counters are derived from the instance list; lifecycle states on the
  (injectable) clock: `Pending` -> `InService`, `Removing` -> gone; asynchronous scaling activities
  (`InProgress` -> `Successful`/`Warning`/`Failed`/`Rejected`) with injectable outcomes and stock per
  instance type (an empty stock fails the activity with `OperationDenied.NoStock`);
  ScaleWithAdjustment clamps to [MinSize, MaxSize] (vendor doc) and, on groups without the
  expected-number feature, refuses while an activity runs (`ScalingActivityInProgress`);
  RemoveInstances (at most 20, `IgnoreInvalidInstance`, `DecreaseDesiredCapacity`, `RemovePolicy`,
  the MinSize check, `ClientToken` idempotence);
- throttling as HTTP 400 `Throttling.User` with `x-acs-retry-after` (milliseconds) from the base's
  rate limit and throttle faults; 5xx faults as `InternalError`/`ServiceUnavailable`.
Reconstructions (not documented anywhere we could read) are marked in comments.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import hashlib
import json
import secrets
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from cloudprovider_grpc.emulator import EmulatorServer, FaultPlan, HttpProblem, Request, Response
from cloudprovider_grpc.emulator.server import REQUEST_LOG_SIZE
from cloudprovider_grpc.providers.alicloud import emulator_seed as seed
from cloudprovider_grpc.providers.alicloud import signing

ESS_VERSIONS = ("2014-08-28", "2022-02-22")
ECS_VERSION = "2014-05-26"
VPC_VERSION = "2016-04-28"
STS_VERSION = "2015-04-01"
#: ±15 minutes (research §5)
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
_REMOVABLE = frozenset({"InService", "Standby", "Stopped"})


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


def _fail(code: str) -> AcsError:
    status, message = _MESSAGES[code]
    return AcsError(status, code, message)


def _missing(name: str) -> AcsError:
    text = f'The input parameter "{name}" that is mandatory for processing this request is not supplied.'
    return AcsError(400, "MissingParameter", text)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _minute(ts: float) -> str:
    # ESS timestamps in activity/instance records are minute-precision (vendor doc examples)
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _parse_ts(value: str) -> float | None:
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise AcsError(400, "InvalidParameter", f"The specified parameter value {value!r} is not a boolean.")


def _rand(n: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(n))


@dataclass
class AccessKey:
    secret: str
    token: str = ""
    expires_at: float | None = None


class AliCloudEmulator(EmulatorServer):
    name = "alicloud"
    prefix = "/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        region: str = "cn-hangzhou",
        access_keys: Mapping[str, str] | None = None,
        oidc_tokens: Iterable[str] = (),
        role_arns: Iterable[str] = (),
        metadata_role: str = "",
        groups: Iterable[Mapping[str, Any]] = (),
        configurations: Iterable[Mapping[str, Any]] = (),
        instance_types: list[dict[str, Any]] | None = None,
        stock: Mapping[str, int] | None = None,
        pending_seconds: float = 5.0,
        removing_seconds: float = 3.0,
        activity_seconds: float = 1.0,
        sts_duration: int = 3600,
        signature_versions: Iterable[str] = ("v1", "v3"),
        clock: Callable[[], float] | None = None,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = None,
        state_file: Path | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {
            "faults": faults,
            "rate_limit_per_s": rate_limit_per_s,
            "state_file": state_file,
        }
        if clock is not None:
            kwargs["clock"] = clock
        super().__init__(host, port, **kwargs)
        self.region = region
        self.keys: dict[str, AccessKey] = {k: AccessKey(v) for k, v in (access_keys or {}).items()}
        self.oidc_tokens: set[str] = set(oidc_tokens)
        self.role_arns: set[str] = set(role_arns)
        self.metadata_role = metadata_role
        self.instance_types = copy.deepcopy(instance_types or seed.INSTANCE_TYPES)
        self.stock: dict[str, int] = dict(stock if stock is not None else {"*": 1000})
        self.pending_seconds = pending_seconds
        self.removing_seconds = removing_seconds
        self.activity_seconds = activity_seconds
        self.sts_duration = sts_duration
        self.signature_versions = frozenset(signature_versions)
        self.groups: dict[str, dict[str, Any]] = {}
        self.configurations: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, dict[str, Any]] = {}
        self.activities: dict[str, dict[str, Any]] = {}
        #: group id -> outcomes for its next scale-out activities: (StatusCode, ErrorCode, ErrorMessage)
        self.next_outcomes: dict[str, list[tuple[str, str, str]]] = {}
        #: actions the caller's RAM policy does not allow (403 Forbidden.Unauthorized)
        self.denied_actions: set[str] = set()
        #: scaling groups the caller's RAM policy denies (a Deny statement on the resource
        #: `acs:ess:*:*:scalinggroup/<id>`, RAM's resource-level authorisation): any action naming one
        #: in `ScalingGroupId` answers 403 Forbidden.Unauthorized. List calls over many groups
        #: (DescribeScalingGroups) stay allowed, as a policy granting `ess:Describe*` on `*` makes them
        #: (our reconstruction: how ESS filters a list call under such a Deny is not documented)
        self.denied_groups: set[str] = set()
        #: instance id -> (Code, Message) RemoveInstances answers for it (injected refusals)
        self.remove_refusals: dict[str, tuple[str, str]] = {}
        self._nonces: dict[str, float] = {}
        self._nonces_kept = NONCES_KEPT
        self._tokens: dict[str, dict[str, Any]] = {}
        self._seq = 0
        # bounded like the base's request log (a long-running `--emulate` server must not grow)
        self._actions: collections.deque[str] = collections.deque(maxlen=REQUEST_LOG_SIZE)
        #: launch template id -> its versions ({VersionNumber, DefaultVersion, LaunchTemplateData})
        self.launch_templates: dict[str, list[dict[str, Any]]] = {}
        for g in groups:
            self.add_group(g)
        for c in configurations:
            self.add_configuration(c)

        self.route("GET", "/", self._api)
        self.route("POST", "/", self._api)
        self.route("GET", "/latest/meta-data/ram/security-credentials/", self._metadata_roles)
        self.route("GET", "/latest/meta-data/ram/security-credentials/{role}", self._metadata_credentials)
        self.route("GET", "/latest/meta-data/Ram/security-credentials/{role}", self._metadata_credentials)
        self.route("GET", "/latest/meta-data/region-id", self._metadata_region)

    # ------------------------------------------------------------------ seeding and inspection
    def add_access_key(self, key_id: str, secret: str) -> None:
        with self.lock:
            self.keys[key_id] = AccessKey(secret)

    def add_group(self, group: Mapping[str, Any], *, instances: int | None = None) -> dict[str, Any]:
        """A scaling group (fields as DescribeScalingGroups answers; `Zones` lists where its
        vSwitches are). `instances` InService instances are created at once (default: its
        DesiredCapacity, or MinSize)."""
        with self.lock:
            g = {
                "RegionId": self.region,
                "LifecycleState": "Active",
                "EnableDesiredCapacity": True,
                "MinSize": 0,
                "MaxSize": 10,
                "ScalingPolicy": "release",
                "RemovalPolicies": ["OldestScalingConfiguration", "OldestInstance"],
                "MultiAZPolicy": "PRIORITY",
                "GroupType": "ECS",
                "Zones": list(seed.ZONES[:1]),
                "VSwitchIds": [],
                "Tags": [],
                "CreationTime": _minute(self.clock()),
                **copy.deepcopy(dict(group)),
            }
            g.setdefault("ScalingGroupName", g["ScalingGroupId"])
            count = instances if instances is not None else int(g.get("DesiredCapacity") or g["MinSize"])
            if not g["EnableDesiredCapacity"]:
                g.pop("DesiredCapacity", None)
            else:
                g["DesiredCapacity"] = int(g.get("DesiredCapacity", count))
            self.groups[g["ScalingGroupId"]] = g
            for _ in range(count):
                self._new_instance(g, "InService", activity="")
            return g

    def add_configuration(self, config: Mapping[str, Any]) -> None:
        with self.lock:
            c = {
                "LifecycleState": "Active",
                "Tags": [],
                "CreationTime": _minute(self.clock()),
                **copy.deepcopy(dict(config)),
            }
            c.setdefault("InstanceTypes", [c["InstanceType"]] if c.get("InstanceType") else [])
            self.configurations[c["ScalingConfigurationId"]] = c

    def add_launch_template(self, template_id: str, *datas: Mapping[str, Any], default: int = 1) -> None:
        """A launch template whose versions 1..n hold these `LaunchTemplateData`s."""
        with self.lock:
            self.launch_templates[template_id] = [
                {
                    "LaunchTemplateId": template_id,
                    "LaunchTemplateName": template_id,
                    "VersionNumber": n,
                    "DefaultVersion": n == default,
                    "LaunchTemplateData": copy.deepcopy(dict(data)),
                }
                for n, data in enumerate(datas, 1)
            ]

    def fail_next_scale_out(
        self,
        group_id: str,
        status: str = "Failed",
        code: str = "OperationDenied.NoStock",
        message: str = "The resource is out of stock in the specified zone. "
        "Please try other types, or choose other regions and zones.",
    ) -> None:
        """The group's next scale-out activity ends `status` with this error (no instances are
        created, or for `Warning` half of them)."""
        with self.lock:
            self.next_outcomes.setdefault(group_id, []).append((status, code, message))

    def set_lifecycle(self, instance_id: str, state: str) -> None:
        """Put an instance in a lifecycle state (Protected, Standby...); `Removing` ends with the
        instance gone after `removing_seconds`, `Pending` with it in service after `pending_seconds`."""
        with self.lock:
            inst = self.instances[instance_id]
            inst["LifecycleState"] = state
            now = self.clock()
            inst["_gone_at"] = now + self.removing_seconds
            inst["_ready_at"] = now + self.pending_seconds

    def expire_temporary_keys(self) -> None:
        """Every temporary key issued so far expires now (the server then refuses it)."""
        with self.lock:
            now = time.time()
            for key in self.keys.values():
                if key.token:
                    key.expires_at = now - 1

    def group_instances(self, group_id: str) -> list[dict[str, Any]]:
        with self.lock:
            self._tick()
            return [copy.deepcopy(i) for i in self.instances.values() if i["ScalingGroupId"] == group_id]

    def group_record(self, group_id: str) -> dict[str, Any]:
        with self.lock:
            self._tick()
            return self._group_json(self.groups[group_id], "2022-02-22")

    def activity_records(self, group_id: str) -> list[dict[str, Any]]:
        with self.lock:
            self._tick()
            return [self._activity_json(a) for a in self._activities_of(group_id)]

    def actions(self) -> list[str]:
        """The Action (or metadata path) of every request since the last `clear_log`, in order,
        whatever the signature version put it in (benchmarks and tests count them)."""
        with self.lock:
            return list(self._actions)

    def clear_log(self) -> None:
        with self.lock:
            super().clear_log()
            self._actions.clear()

    def keep_history(self, requests: int) -> None:
        """The base's log, the actions and the signature nonces: the newest `requests` of each."""
        with self.lock:
            super().keep_history(requests)
            self._actions = collections.deque(self._actions, maxlen=requests)
            self._nonces_kept = max(2, requests)

    def _note(self, action: str) -> None:
        # interned: ten thousand "DescribeScalingInstances" cost one string, not ten thousand copies
        self._actions.append(sys.intern(action))

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "configurations": self.configurations,
            "instances": self.instances,
            "activities": self.activities,
            "stock": self.stock,
            "keys": {k: [v.secret, v.token, v.expires_at] for k, v in self.keys.items()},
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.groups.update(data.get("groups", {}))
        self.configurations.update(data.get("configurations", {}))
        self.instances = dict(data.get("instances", {}))
        self.activities = dict(data.get("activities", {}))
        self.stock.update(data.get("stock", {}))
        for k, (secret, token, expires) in data.get("keys", {}).items():
            self.keys.setdefault(k, AccessKey(secret, token, expires))

    # ------------------------------------------------------------------ errors and throttling
    def error_body(self, status: int, message: str) -> Any:
        code = {
            404: "InvalidAction.NotFound",
            405: "InvalidAction.NotFound",
            429: "Throttling.User",
            500: "InternalError",
            502: "ServiceUnavailable",
            503: "ServiceUnavailable",
        }.get(status, "InvalidParameter")
        if status == 429:
            message = "Request was denied due to user flow control."
        elif status >= 500:
            message = "The request processing has failed due to some unknown error, exception or failure."
        return self._envelope(code, message)

    def _envelope(self, code: str, message: str) -> dict[str, Any]:
        return {
            "RequestId": str(uuid.uuid4()).upper(),
            "HostId": "ess.aliyuncs.com",
            "Code": code,
            "Message": message,
            "Recommend": f"https://api.aliyun.com/troubleshoot?q={code}",
        }

    def _reply(
        self, h: Any, req: Request, resp: Response, fault: str | None, processed: bool = False
    ) -> None:
        # The base answers its rate limit and throttle faults with 429 + Retry-After; ESS answers
        # throttling with HTTP 400 `Throttling.User` and `x-acs-retry-after` in milliseconds
        # (research §5; the Tea SDK raises ThrottlingException only with that header).
        # The base writes the headers and the body separately; without TCP_NODELAY each answer
        # waits ~40 ms for the client's delayed ACK (Nagle), which would dominate every figure.
        with contextlib.suppress(OSError, AttributeError):
            h.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if resp.status == 429:
            after = resp.headers.pop("Retry-After", None)
            resp = Response(400, self.error_body(429, ""), dict(resp.headers))
            if after:
                resp.headers["x-acs-retry-after"] = str(int(float(after) * 1000))
        super()._reply(h, req, resp, fault, processed)

    # ------------------------------------------------------------------ request handling
    def _params(self, req: Request) -> dict[str, str]:
        params = dict(parse_qsl(req.raw_query, keep_blank_values=True))
        ctype = (req.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if req.body and ctype == "application/x-www-form-urlencoded":
            params.update(parse_qsl(req.body.decode("utf-8", "replace"), keep_blank_values=True))
        return params

    def _api(self, req: Request) -> Response:
        try:
            params = self._params(req)
            action = req.headers.get("x-acs-action") or params.get("Action", "")
            version = req.headers.get("x-acs-version") or params.get("Version", "")
            self._note(action)
            handler = self._handler(action, version)
            self._tick()
            if action != "AssumeRoleWithOIDC":
                self._authenticate(req, params)
            if action in self.denied_actions or params.get("ScalingGroupId") in self.denied_groups:
                raise _fail("Forbidden.Unauthorized")
            body = handler(params, version)
            body.setdefault("RequestId", str(uuid.uuid4()).upper())
            return Response(200, body)
        except AcsError as err:
            return Response(err.status, self._envelope(err.code, err.message), dict(err.headers))

    def _handler(self, action: str, version: str) -> Callable[[dict[str, str], str], dict[str, Any]]:
        table: dict[str, tuple[tuple[str, ...], Callable[[dict[str, str], str], dict[str, Any]]]] = {
            "DescribeScalingGroups": (ESS_VERSIONS, self._describe_groups),
            "DescribeScalingInstances": (ESS_VERSIONS, self._describe_instances),
            "DescribeScalingConfigurations": (ESS_VERSIONS, self._describe_configurations),
            "DescribeScalingActivities": (ESS_VERSIONS, self._describe_activities),
            "ScaleWithAdjustment": (ESS_VERSIONS, self._scale_with_adjustment),
            "RemoveInstances": (ESS_VERSIONS, self._remove_instances),
            "DescribeInstanceTypes": ((ECS_VERSION,), self._describe_instance_types),
            "DescribeVSwitches": ((VPC_VERSION,), self._describe_vswitches),
            "DescribeLaunchTemplateVersions": ((ECS_VERSION,), self._describe_launch_template_versions),
            "AssumeRoleWithOIDC": ((STS_VERSION,), self._assume_role_with_oidc),
        }
        if not action:
            raise _missing("Action")
        entry = table.get(action)
        if entry is None:
            raise _fail("InvalidAction.NotFound")
        versions, handler = entry
        if version not in versions:
            raise _fail("InvalidVersion")
        return handler

    # ------------------------------------------------------------------ signatures
    def _authenticate(self, req: Request, params: dict[str, str]) -> None:
        header = req.headers.get("Authorization") or ""
        if header.startswith(signing.V3_ALGORITHM) and "v3" in self.signature_versions:
            _, key = self._verify_v3(req, header)
            token = req.headers.get("x-acs-security-token") or ""
        elif "Signature" in params and "v1" in self.signature_versions:
            _, key = self._verify_v1(req, params)
            token = params.get("SecurityToken", "")
        else:
            raise _fail("IncompleteSignature")
        if key.token:
            if token != key.token:
                raise _fail("InvalidSecurityToken.MismatchWithAccessKey")
            if key.expires_at is not None and time.time() >= key.expires_at:
                raise _fail("InvalidSecurityToken.Expired")

    def _key(self, key_id: str) -> AccessKey:
        key = self.keys.get(key_id)
        if key is None:
            raise _fail("InvalidAccessKeyId.NotFound")
        return key

    def _check_fresh(self, when: str, nonce: str) -> None:
        ts = _parse_ts(when)
        if ts is None:
            raise _fail("InvalidTimeStamp.Format")
        now = time.time()
        if abs(now - ts) > TIMESTAMP_WINDOW:
            raise _fail("InvalidTimeStamp.Expired")
        if not nonce:
            raise _fail("MissingSignatureNonce")
        if nonce in self._nonces:
            raise _fail("SignatureNonceUsed")
        if len(self._nonces) >= self._nonces_kept:
            # expired ones first; then the oldest, so a long-running `--emulate` server stays flat
            # (a replay older than the newest `_nonces_kept` requests then passes unnoticed)
            fresh = {n: t for n, t in self._nonces.items() if now - t <= 2 * TIMESTAMP_WINDOW}
            self._nonces = dict(list(fresh.items())[-(self._nonces_kept // 2) :])
        self._nonces[nonce] = now

    def _mismatch(self, string_to_sign: str) -> AcsError:
        return AcsError(
            400,
            "SignatureDoesNotMatch",
            "Specified signature is not matched with our calculation. "
            f"server string to sign is:{string_to_sign}",
        )

    def _verify_v3(self, req: Request, header: str) -> tuple[str, AccessKey]:
        auth = signing.V3Authorization.parse(header)
        if auth is None:
            raise _fail("IncompleteSignature")
        key = self._key(auth.access_key_id)
        signed = {n.lower() for n in auth.signed_headers}
        if not {"x-acs-date", "x-acs-signature-nonce"} <= signed:
            raise AcsError(400, "IncompleteSignature", "x-acs-date and x-acs-signature-nonce must be signed.")
        headers = {n: req.headers.get(n) or "" for n in signed}
        query = parse_qsl(req.raw_query, keep_blank_values=True)
        body_hash = hashlib.sha256(req.body or b"").hexdigest()
        sts = signing.v3_string_to_sign(req.method, req.path, query, headers, signed, body_hash)
        if not signing.constant_time_equal(signing.v3_signature(key.secret, sts), auth.signature):
            raise self._mismatch(sts)
        self._check_fresh(headers["x-acs-date"], headers["x-acs-signature-nonce"])
        return auth.access_key_id, key

    def _verify_v1(self, req: Request, params: dict[str, str]) -> tuple[str, AccessKey]:
        for name in ("AccessKeyId", "SignatureMethod", "SignatureVersion", "SignatureNonce", "Timestamp"):
            if not params.get(name):
                raise _missing(name)
        if params["SignatureMethod"] != "HMAC-SHA1" or params["SignatureVersion"] != "1.0":
            raise AcsError(
                400, "InvalidParameter", "SignatureMethod must be HMAC-SHA1 and SignatureVersion 1.0."
            )
        key = self._key(params["AccessKeyId"])
        sts = signing.v1_string_to_sign(req.method, params.items())
        if not signing.constant_time_equal(signing.v1_signature(key.secret, sts), params["Signature"]):
            raise self._mismatch(sts)
        self._check_fresh(params["Timestamp"], params["SignatureNonce"])
        return params["AccessKeyId"], key

    # ------------------------------------------------------------------ the clock
    def _tick(self) -> None:
        """Advance every state machine to the clock's now (called under the lock)."""
        now = self.clock()
        for iid, inst in list(self.instances.items()):
            state = inst["LifecycleState"]
            if state in ("Pending", "Pending:Wait") and now >= inst["_ready_at"]:
                inst["LifecycleState"] = "InService"
            elif state in ("Removing", "Removing:Wait") and now >= inst["_gone_at"]:
                del self.instances[iid]
        for act in self.activities.values():
            if act["StatusCode"] == "InProgress" and now >= act["_end_at"]:
                status, code, message = act["_outcome"]
                act["StatusCode"] = status
                act["Progress"] = 100
                act["EndTime"] = _minute(act["_end_at"])
                act["ErrorCode"], act["ErrorMessage"] = code, message
                act["StatusMessage"] = message or f'"{act["Description"]}" succeeded.'

    def _next_id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-{self.region[:2]}{_rand(17)}{self._seq % 10}"

    def _new_instance(self, g: Mapping[str, Any], state: str, activity: str) -> dict[str, Any]:
        now = self.clock()
        zones = g.get("Zones") or list(seed.ZONES[:1])
        live = [i for i in self.instances.values() if i["ScalingGroupId"] == g["ScalingGroupId"]]
        # spread over the group's zones like the "balance" multi-zone policy
        zone = min(zones, key=lambda z: (sum(1 for i in live if i["ZoneId"] == z), zones.index(z)))
        config = self.configurations.get(g.get("ActiveScalingConfigurationId") or "", {})
        inst = {
            "InstanceId": f"i-{self.region[3:5] or 'bp'}{_rand(18)}",
            "ScalingGroupId": g["ScalingGroupId"],
            "ScalingConfigurationId": g.get("ActiveScalingConfigurationId", ""),
            "LifecycleState": state,
            "HealthStatus": "Healthy",
            "CreationType": "AutoCreated",
            "Entrusted": True,
            "ZoneId": zone,
            "CreationTime": _minute(now),
            "CreatedTime": _iso(now),
            "ScalingActivityId": activity,
            "WeightedCapacity": 1,
            "WarmupState": "NoNeedWarmup",
            "InstanceType": config.get("InstanceType", ""),
            "_created": now,
            "_ready_at": now + self.pending_seconds,
            "_gone_at": 0.0,
        }
        self.instances[inst["InstanceId"]] = inst
        return inst

    # ------------------------------------------------------------------ shapes
    def _live(self, group_id: str) -> list[dict[str, Any]]:
        return [i for i in self.instances.values() if i["ScalingGroupId"] == group_id]

    def _group_json(self, g: Mapping[str, Any], version: str) -> dict[str, Any]:
        insts = self._live(g["ScalingGroupId"])

        def count(*states: str) -> int:
            return sum(1 for i in insts if i["LifecycleState"] in states)

        out = {k: copy.deepcopy(v) for k, v in g.items() if k != "Zones"}
        out.update(
            {
                "TotalCapacity": len(insts),
                "TotalInstanceCount": len(insts),
                "ActiveCapacity": count("InService"),
                "PendingCapacity": count("Pending"),
                "PendingWaitCapacity": count("Pending:Wait"),
                "RemovingCapacity": count("Removing"),
                "RemovingWaitCapacity": count("Removing:Wait"),
                "ProtectedCapacity": count("Protected"),
                "StandbyCapacity": count("Standby"),
                "StoppedCapacity": count("Stopped"),
                "InitCapacity": 0,
                "SpotCapacity": 0,
            }
        )
        if version == "2014-08-28":
            out["VSwitchIds"] = {"VSwitchId": out.get("VSwitchIds", [])}
            out["RemovalPolicies"] = {"RemovalPolicy": out.get("RemovalPolicies", [])}
            out.pop("Tags", None)
        return out

    def _instance_json(self, inst: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in inst.items() if not k.startswith("_") and k != "InstanceType"}

    def _activity_json(self, act: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in act.items() if not k.startswith("_")}

    def _activities_of(self, group_id: str) -> list[dict[str, Any]]:
        acts = [a for a in self.activities.values() if a["ScalingGroupId"] == group_id]
        return sorted(acts, key=lambda a: a["_seq"], reverse=True)

    # ------------------------------------------------------------------ helpers for handlers
    @staticmethod
    def _numbered(params: Mapping[str, str], *names: str) -> list[str]:
        """`Name.1`, `Name.2`... values for any of the given spellings (2014: singular, 2022: plural)."""
        out: list[tuple[int, str]] = []
        for key, value in params.items():
            base, _, n = key.rpartition(".")
            if base in names and n.isdigit():
                out.append((int(n), value))
        return [v for _, v in sorted(out)]

    @staticmethod
    def _require(params: Mapping[str, str], name: str) -> str:
        value = params.get(name, "")
        if not value:
            raise _missing(name)
        return value

    @staticmethod
    def _page(params: Mapping[str, str], default: int, maximum: int) -> tuple[int, int]:
        try:
            number = int(params.get("PageNumber") or 1)
            size = int(params.get("PageSize") or default)
        except ValueError:
            raise AcsError(400, "InvalidParameter", "PageNumber and PageSize must be integers.") from None
        if number < 1 or not 1 <= size <= maximum:
            raise AcsError(
                400, "InvalidParameter", f"PageSize must be 1..{maximum} and PageNumber at least 1."
            )
        return number, size

    def _group(self, params: Mapping[str, str]) -> dict[str, Any]:
        gid = self._require(params, "ScalingGroupId")
        g = self.groups.get(gid)
        if g is None:
            raise _fail("InvalidScalingGroupId.NotFound")
        return g

    @staticmethod
    def _wrap(version: str, name: str, inner: str, items: list[Any]) -> dict[str, Any]:
        return {name: {inner: items} if version == "2014-08-28" else items}

    # ------------------------------------------------------------------ ESS reads
    def _describe_groups(self, params: dict[str, str], version: str) -> dict[str, Any]:
        ids = self._numbered(params, "ScalingGroupIds", "ScalingGroupId")
        names = self._numbered(params, "ScalingGroupNames", "ScalingGroupName")
        if params.get("ScalingGroupName"):
            names.append(params["ScalingGroupName"])
        if len(ids) > 20 or len(names) > 20:
            raise AcsError(400, "InvalidParameter", "At most 20 scaling group ids or names may be given.")
        number, size = self._page(params, 10, 50)
        groups = sorted(self.groups.values(), key=lambda g: g["ScalingGroupId"])
        wanted_tags = self._tag_filter(params)
        if wanted_tags:
            # [reconstruction] every given tag must be on the group; a tag without Value matches any value
            groups = [g for g in groups if self._has_tags(g, wanted_tags)]
        if ids or names:
            # ids and names of inactive groups are left out without an error (vendor doc)
            groups = [
                g
                for g in groups
                if (g["ScalingGroupId"] in ids or g["ScalingGroupName"] in names)
                and g["LifecycleState"] == "Active"
            ]
        page = groups[(number - 1) * size : number * size]
        body = self._wrap(
            version, "ScalingGroups", "ScalingGroup", [self._group_json(g, version) for g in page]
        )
        body.update({"TotalCount": len(groups), "PageNumber": number, "PageSize": size})
        return body

    @staticmethod
    def _tag_filter(params: Mapping[str, str]) -> dict[str, str | None]:
        tags: dict[str, str | None] = {}
        for key, value in params.items():
            base, _, field_name = key.rpartition(".")
            if base.startswith("Tags.") and field_name == "Key":
                tags[value] = params.get(f"{base}.Value")
        return tags

    @staticmethod
    def _has_tags(group: Mapping[str, Any], wanted: Mapping[str, str | None]) -> bool:
        have = {str(t.get("TagKey")): str(t.get("TagValue") or "") for t in group.get("Tags") or []}
        return all(k in have and (v is None or have[k] == v) for k, v in wanted.items())

    def _describe_instances(self, params: dict[str, str], version: str) -> dict[str, Any]:
        gid = params.get("ScalingGroupId", "")
        states = self._numbered(params, "LifecycleStates")
        if params.get("LifecycleState"):
            states.append(params["LifecycleState"])
        ids = self._numbered(params, "InstanceIds", "InstanceId")
        number, size = self._page(params, 10, 100)
        insts = sorted(self.instances.values(), key=lambda i: (i["_created"], i["InstanceId"]))
        insts = [
            i
            for i in insts
            if (not gid or i["ScalingGroupId"] == gid)
            and (not states or i["LifecycleState"] in states)
            and (not ids or i["InstanceId"] in ids)
            and (not params.get("CreationType") or i["CreationType"] == params["CreationType"])
        ]
        page = insts[(number - 1) * size : number * size]
        body = self._wrap(
            version, "ScalingInstances", "ScalingInstance", [self._instance_json(i) for i in page]
        )
        body.update({"TotalCount": len(insts), "PageNumber": number, "PageSize": size})
        return body

    def _describe_configurations(self, params: dict[str, str], version: str) -> dict[str, Any]:
        gid = params.get("ScalingGroupId", "")
        ids = self._numbered(params, "ScalingConfigurationIds", "ScalingConfigurationId")
        number, size = self._page(params, 10, 50)
        configs = [
            c
            for c in sorted(self.configurations.values(), key=lambda c: c["ScalingConfigurationId"])
            if (not gid or c["ScalingGroupId"] == gid) and (not ids or c["ScalingConfigurationId"] in ids)
        ]
        page = [copy.deepcopy(c) for c in configs[(number - 1) * size : number * size]]
        if version == "2014-08-28":
            for c in page:
                c["Tags"] = {"Tag": c.get("Tags", [])}
                c["InstanceTypes"] = {"InstanceType": c.get("InstanceTypes", [])}
        body = self._wrap(version, "ScalingConfigurations", "ScalingConfiguration", page)
        body.update({"TotalCount": len(configs), "PageNumber": number, "PageSize": size})
        return body

    def _describe_activities(self, params: dict[str, str], version: str) -> dict[str, Any]:
        g = self._group(params)
        ids = self._numbered(params, "ScalingActivityIds", "ScalingActivityId")
        number, size = self._page(params, 10, 50)
        acts = [
            a
            for a in self._activities_of(g["ScalingGroupId"])
            if (not ids or a["ScalingActivityId"] in ids)
            and (not params.get("StatusCode") or a["StatusCode"] == params["StatusCode"])
        ]
        page = [self._activity_json(a) for a in acts[(number - 1) * size : number * size]]
        if version == "2014-08-28":
            # the 2014 API wraps these lists too, as alibaba-cloud-sdk-go's ess.ScalingActivity
            # models them ({"CreatedInstances": {"CreatedInstance": [...]}}); 2022-02-22 does not
            for a in page:
                for name, inner in (
                    ("CreatedInstances", "CreatedInstance"),
                    ("DestroyedInstances", "DestroyedInstance"),
                ):
                    a[name] = {inner: a.get(name, [])}
        body = self._wrap(version, "ScalingActivities", "ScalingActivity", page)
        body.update({"TotalCount": len(acts), "PageNumber": number, "PageSize": size})
        return body

    # ------------------------------------------------------------------ ESS changes
    def _client_token(self, params: Mapping[str, str], action: str) -> tuple[str, dict[str, Any] | None]:
        token = params.get("ClientToken", "")
        if not token:
            return "", None
        if len(token) > 64 or not token.isascii():
            raise AcsError(400, "InvalidParameter", "ClientToken must be at most 64 ASCII characters.")
        key = f"{action}|{params.get('ScalingGroupId', '')}|{token}"
        done = self._tokens.get(key)
        return key, copy.deepcopy(done) if done is not None else None

    def _start_activity(
        self, g: dict[str, Any], *, kind: str, cause: str, description: str, metadata: str, total: int
    ) -> dict[str, Any]:
        now = self.clock()
        self._seq += 1
        act = {
            "ScalingActivityId": self._next_id("asa"),
            "ScalingGroupId": g["ScalingGroupId"],
            "StatusCode": "InProgress",
            "StatusMessage": "",
            "Progress": 0,
            "Cause": cause,
            "Description": description,
            "StartTime": _minute(now),
            "TotalCapacity": str(total),
            "ActivityMetadata": metadata,
            "ErrorCode": "",
            "ErrorMessage": "",
            "CreatedCapacity": 0,
            "DestroyedCapacity": 0,
            "CreatedInstances": [],
            "DestroyedInstances": [],
            "ScalingInstanceNumber": 0,
            "_seq": self._seq,
            "_kind": kind,
            "_end_at": now + self.activity_seconds,
            "_outcome": ("Successful", "", ""),
        }
        self.activities[act["ScalingActivityId"]] = act
        self._forget_old_activities(g["ScalingGroupId"])
        return act

    def _forget_old_activities(self, group_id: str) -> None:
        finished = [a for a in self._activities_of(group_id) if a["StatusCode"] != "InProgress"]
        for old in finished[ACTIVITIES_KEPT:]:
            del self.activities[old["ScalingActivityId"]]

    def _remember_token(self, key: str, body: dict[str, Any]) -> None:
        self._tokens[key] = copy.deepcopy(body)
        while len(self._tokens) > CLIENT_TOKENS_KEPT:
            del self._tokens[next(iter(self._tokens))]  # the oldest (dicts keep insertion order)

    def _scale_out(self, g: dict[str, Any], act: dict[str, Any], n: int) -> None:
        queue = self.next_outcomes.get(g["ScalingGroupId"]) or []
        injected = queue.pop(0) if queue else None
        config = self.configurations.get(g.get("ActiveScalingConfigurationId") or "", {})
        itype = config.get("InstanceType", "")
        available = self.stock.get(itype, self.stock.get("*", n))
        make = min(n, available)
        outcome: tuple[str, str, str] = ("Successful", "", "")
        if injected is not None:
            outcome = injected
            make = 0 if injected[0] in ("Failed", "Rejected") else min(make, n // 2)
        elif make < n:
            outcome = (
                "Failed" if make == 0 else "Warning",
                "OperationDenied.NoStock",
                f"Fail to create Instance into scaling group(id:{g['ScalingGroupId']}) : "
                "The resource is out of "
                "stock in the specified zone. Please try other types, or choose other regions and zones.",
            )  # wording: a reconstruction of the vendor's stock-out message
        if itype in self.stock:
            self.stock[itype] -= make
        elif "*" in self.stock:
            self.stock["*"] -= make
        created = [self._new_instance(g, "Pending", act["ScalingActivityId"]) for _ in range(make)]
        act["CreatedInstances"] = [i["InstanceId"] for i in created]
        act["CreatedCapacity"] = act["ScalingInstanceNumber"] = make
        act["_outcome"] = outcome
        act["_end_at"] = self.clock() + max(self.activity_seconds, self.pending_seconds if make else 0.0)

    def _scale_in(self, act: dict[str, Any], victims: list[dict[str, Any]]) -> None:
        now = self.clock()
        for inst in victims:
            inst["LifecycleState"] = "Removing"
            inst["_gone_at"] = now + self.removing_seconds
        act["DestroyedInstances"] = [i["InstanceId"] for i in victims]
        act["DestroyedCapacity"] = act["ScalingInstanceNumber"] = len(victims)
        act["_end_at"] = now + max(self.activity_seconds, self.removing_seconds)

    def _busy(self, g: Mapping[str, Any]) -> bool:
        return any(a["StatusCode"] == "InProgress" for a in self._activities_of(g["ScalingGroupId"]))

    def _scale_with_adjustment(self, params: dict[str, str], version: str) -> dict[str, Any]:
        g = self._group(params)
        token_key, done = self._client_token(params, "ScaleWithAdjustment")
        if done is not None:
            return done
        kind = self._require(params, "AdjustmentType")
        try:
            value = int(self._require(params, "AdjustmentValue"))
        except ValueError:
            raise AcsError(400, "InvalidParameter", "AdjustmentValue must be an integer.") from None
        limits = {
            "TotalCapacity": (0, 2000),
            "QuantityChangeInCapacity": (-1000, 1000),
            "PercentChangeInCapacity": (-100, 10000),
        }
        if kind not in limits:
            raise AcsError(400, "InvalidParameter", f"The specified AdjustmentType {kind!r} is not valid.")
        lo, hi = limits[kind]
        if not lo <= value <= hi:
            raise AcsError(400, "InvalidParameter", f"AdjustmentValue must be {lo}..{hi} for {kind}.")
        if g["LifecycleState"] != "Active":
            raise _fail("IncorrectScalingGroupStatus")
        desired_mode = bool(g.get("EnableDesiredCapacity"))
        if not desired_mode and self._busy(g):
            raise _fail("ScalingActivityInProgress")
        live = [i for i in self._live(g["ScalingGroupId"]) if not i["LifecycleState"].startswith("Removing")]
        current = int(g["DesiredCapacity"]) if desired_mode else len(live)
        if kind == "TotalCapacity":
            target = value
        elif kind == "QuantityChangeInCapacity":
            target = current + value
        else:
            target = current + int(current * value / 100)
        target = max(int(g["MinSize"]), min(int(g["MaxSize"]), target))  # clamped (vendor doc)
        metadata = params.get("ActivityMetadata", "")
        if metadata:
            try:
                if not isinstance(json.loads(metadata), dict):
                    raise ValueError
            except ValueError:
                raise AcsError(400, "InvalidParameter", "ActivityMetadata must be a JSON object.") from None
        if desired_mode:
            g["DesiredCapacity"] = target
        body: dict[str, Any] = {}
        sync = _bool(params.get("SyncActivity"), True)
        diff = target - len(live)
        if diff == 0 and desired_mode:
            body["ActivityType"] = "CapacityChange"
        else:
            act = self._start_activity(
                g,
                kind="out" if diff > 0 else "in",
                cause="A user requests to execute scaling rule, changing the Total Capacity "
                f"from {len(live)} to {target}.",
                description=f'{"Add" if diff > 0 else "Remove"} "{abs(diff)}" ECS instances',
                metadata=metadata,
                total=target,
            )
            if diff > 0:
                self._scale_out(g, act, diff)
            elif diff < 0:
                oldest = sorted(
                    (i for i in live if i["LifecycleState"] in _REMOVABLE | {"Pending"}),
                    key=lambda i: i["_created"],
                )
                self._scale_in(act, oldest[:-diff])
            body["ScalingActivityId"] = act["ScalingActivityId"]
            body["ActivityType"] = "CapacityChange" if (desired_mode and not sync) else "ScalingActivity"
        if token_key:
            self._remember_token(token_key, body)
        return body

    def _remove_instances(self, params: dict[str, str], version: str) -> dict[str, Any]:
        g = self._group(params)
        token_key, done = self._client_token(params, "RemoveInstances")
        if done is not None:
            return done
        ids = self._numbered(params, "InstanceIds", "InstanceId")
        if not ids:
            raise _missing("InstanceIds")
        if len(ids) > 20:
            raise AcsError(400, "InvalidParameter", "At most 20 instances can be removed in one call.")
        policy = params.get("RemovePolicy") or "release"
        if policy not in ("release", "recycle", "remove"):
            raise AcsError(
                400, "InvalidParameter", f"The specified RemovePolicy {policy!r} is not supported."
            )
        decrease = _bool(params.get("DecreaseDesiredCapacity"), True)
        ignore = _bool(params.get("IgnoreInvalidInstance"), False)
        if g["LifecycleState"] != "Active":
            raise _fail("IncorrectScalingGroupStatus")
        desired_mode = bool(g.get("EnableDesiredCapacity"))
        if not desired_mode and self._busy(g):
            raise _fail("ScalingActivityInProgress")
        valid: list[dict[str, Any]] = []
        ignored: list[dict[str, str]] = []
        for iid in dict.fromkeys(ids):
            inst = self.instances.get(iid)
            problem: tuple[int, str, str] | None = None
            if inst is None or inst["ScalingGroupId"] != g["ScalingGroupId"]:
                problem = (
                    404,
                    "InvalidInstanceId.NotFound",
                    f'The specified instance "{iid}" does not exist in the scaling group.',
                )
            elif iid in self.remove_refusals:
                problem = (400, *self.remove_refusals[iid])
            elif inst["LifecycleState"] not in _REMOVABLE:
                # [reconstruction] the doc requires In Service instances; the code is ours
                problem = (
                    400,
                    "IncorrectInstanceStatus",
                    f'The current status "{inst["LifecycleState"]}" of instance "{iid}" '
                    "does not support this action.",
                )
            if problem is None:
                assert inst is not None
                valid.append(inst)
            elif ignore:
                ignored.append({"InstanceId": iid, "Code": problem[1], "Message": problem[2]})
            else:
                raise AcsError(*problem)
        live = [i for i in self._live(g["ScalingGroupId"]) if not i["LifecycleState"].startswith("Removing")]
        total = int(g["DesiredCapacity"]) if desired_mode else len(live)
        if valid and total - len(valid) < int(g["MinSize"]) and decrease:
            raise _fail("IncorrectCapacity.MinSize")
        body: dict[str, Any] = {}
        if version == "2022-02-22":
            body["IgnoredInstances"] = ignored
        if valid:
            if desired_mode and decrease:
                g["DesiredCapacity"] = max(int(g["MinSize"]), int(g["DesiredCapacity"]) - len(valid))
            act = self._start_activity(
                g,
                kind="in",
                cause="A user removes instances from the scaling group.",
                description=f'Remove "{len(valid)}" ECS instances',
                metadata="",
                total=len(live) - len(valid),
            )
            self._scale_in(act, valid)
            if ignored:
                act["_outcome"] = ("Warning", ignored[0]["Code"], ignored[0]["Message"])
            body["ScalingActivityId"] = act["ScalingActivityId"]
        if token_key:
            self._remember_token(token_key, body)
        return body

    # ------------------------------------------------------------------ ECS
    def _describe_instance_types(self, params: dict[str, str], version: str) -> dict[str, Any]:
        wanted = self._numbered(params, "InstanceTypes")
        if len(wanted) > 10:
            raise AcsError(400, "InvalidParameter", "At most 10 InstanceTypes may be given.")
        try:
            limit = int(params.get("MaxResults") or 1600)
            offset = int(params.get("NextToken") or 0)
        except ValueError:
            raise _fail("InvalidNextToken") from None
        if not 1 <= limit <= 1600:
            raise AcsError(400, "InvalidParameter", "MaxResults must be 1..1600.")
        types = [t for t in self.instance_types if not wanted or t["InstanceTypeId"] in wanted]
        page = types[offset : offset + limit]
        body: dict[str, Any] = {"InstanceTypes": {"InstanceType": copy.deepcopy(page)}}
        if offset + limit < len(types):
            body["NextToken"] = str(offset + limit)
        return body

    def _describe_launch_template_versions(self, params: dict[str, str], version: str) -> dict[str, Any]:
        template_id = params.get("LaunchTemplateId", "")
        if template_id not in self.launch_templates:
            raise AcsError(
                404, "InvalidLaunchTemplate.NotFound", "The specified launch template does not exist."
            )
        numbers = {int(v) for v in self._numbered(params, "LaunchTemplateVersion") if v.isdigit()}
        default_only = _bool(params.get("DefaultVersion"), False)
        detail = _bool(params.get("DetailFlag"), False)
        number, size = self._page(params, 10, 50)
        found = [
            copy.deepcopy(v)
            for v in self.launch_templates[template_id]
            if (not numbers or v["VersionNumber"] in numbers) and (not default_only or v["DefaultVersion"])
        ]
        for v in found:
            if not detail:
                v.pop("LaunchTemplateData", None)
        page = found[(number - 1) * size : number * size]
        return {
            "LaunchTemplateVersionSets": {"LaunchTemplateVersionSet": page},
            "TotalCount": len(found),
            "PageNumber": number,
            "PageSize": size,
        }

    # ------------------------------------------------------------------ VPC
    def _describe_vswitches(self, params: dict[str, str], version: str) -> dict[str, Any]:
        """The groups' vSwitches (each group's `VSwitchIds` paired with its `Zones`)."""
        number, size = self._page(params, 50, 50)
        found: list[dict[str, Any]] = []
        for g in sorted(self.groups.values(), key=lambda g: g["ScalingGroupId"]):
            for vsw, zone in zip(g.get("VSwitchIds") or [], g.get("Zones") or [], strict=False):
                if params.get("VSwitchId") not in (None, "", vsw) or params.get("ZoneId") not in (
                    None,
                    "",
                    zone,
                ):
                    continue
                if not any(v["VSwitchId"] == vsw for v in found):
                    found.append(
                        {
                            "VSwitchId": vsw,
                            "ZoneId": zone,
                            "VpcId": "vpc-bp1emulated0000000",
                            "Status": "Available",
                            "CidrBlock": "172.16.0.0/24",
                            "IsDefault": False,
                        }
                    )
        page = found[(number - 1) * size : number * size]
        return {
            "VSwitches": {"VSwitch": page},
            "TotalCount": len(found),
            "PageNumber": number,
            "PageSize": size,
        }

    # ------------------------------------------------------------------ STS and metadata
    def _issue_key(self, duration: float) -> tuple[str, AccessKey]:
        key_id = f"STS.{_rand(24)}"
        key = AccessKey(secrets.token_urlsafe(24), f"CAIS{secrets.token_urlsafe(48)}", time.time() + duration)
        self.keys[key_id] = key
        return key_id, key

    def _assume_role_with_oidc(self, params: dict[str, str], version: str) -> dict[str, Any]:
        for name in ("RoleArn", "OIDCProviderArn", "OIDCToken", "RoleSessionName"):
            self._require(params, name)
        if params["OIDCToken"] not in self.oidc_tokens:
            # [reconstruction] STS's exact code for a token it cannot verify
            raise _fail("AuthenticationFail.OIDCToken.Invalid")
        if self.role_arns and params["RoleArn"] not in self.role_arns:
            raise _fail("EntityNotExist.Role")
        try:
            duration = int(params.get("DurationSeconds") or 3600)
        except ValueError:
            raise _fail("InvalidParameter.DurationSeconds") from None
        key_id, key = self._issue_key(min(duration, self.sts_duration))
        assert key.expires_at is not None
        role_name = params["RoleArn"].rpartition("/")[2]
        return {
            "Credentials": {
                "AccessKeyId": key_id,
                "AccessKeySecret": key.secret,
                "SecurityToken": key.token,
                "Expiration": _iso(key.expires_at),
            },
            "AssumedRoleUser": {
                "Arn": f"{params['RoleArn']}/{params['RoleSessionName']}",
                "AssumedRoleId": f"3{_rand(16)}:{params['RoleSessionName']}",
            },
            "OIDCTokenInfo": {
                "Subject": "system:serviceaccount:kube-system:cluster-autoscaler",
                "Issuer": "https://oidc-ack.emulated",
                "ClientIds": "sts.aliyuncs.com",
            },
            "SourceIdentity": role_name,
        }

    def _metadata_roles(self, req: Request) -> Response:
        self._note(req.path)
        if not self.metadata_role:
            return Response(404, b"", {"Content-Type": "text/plain"})
        return Response(200, self.metadata_role.encode(), {"Content-Type": "text/plain"})

    def _metadata_credentials(self, req: Request) -> Response:
        self._note(req.path)
        if not self.metadata_role or req.params["role"] != self.metadata_role:
            return Response(404, b"", {"Content-Type": "text/plain"})
        key_id, key = self._issue_key(self.sts_duration)
        assert key.expires_at is not None
        return Response(
            200,
            {
                "AccessKeyId": key_id,
                "AccessKeySecret": key.secret,
                "SecurityToken": key.token,
                "Expiration": _iso(key.expires_at),
                "LastUpdated": _iso(time.time()),
                "Code": "Success",
            },
        )

    def _metadata_region(self, req: Request) -> Response:
        self._note(req.path)
        return Response(200, self.region.encode(), {"Content-Type": "text/plain"})


def demo_emulator(**kwargs: Any) -> AliCloudEmulator:
    """The emulated region `--emulate` starts with: the two demo groups (one with a GPU type)."""
    emu = AliCloudEmulator(**kwargs)
    for g in seed.DEMO_GROUPS:
        emu.add_group(g)
    for c in seed.DEMO_CONFIGURATIONS:
        emu.add_configuration(c)
    return emu
