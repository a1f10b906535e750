"""How the AliCloud emulator takes a request in: the parameters (query or form body), routing by
`Action`/`Version` (or the V3 headers), signatures V1 and V3 with their nonce and timestamp checks and
temporary keys, the JSON error envelope and throttling as ESS answers it, and the parameter parsers
every action shares. Kept apart from the cloud's state (core.py) so that the wire's rules can be read
in one place; the actions themselves are in ess.py and services.py."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from cloudprovider_grpc.emulators import Request, Response
from cloudprovider_grpc.emulators.alicloud.acs import (
    TIMESTAMP_WINDOW,
    AccessKey,
    AcsError,
    Handler,
    fail,
    missing,
    parse_time,
)
from cloudprovider_grpc.emulators.alicloud.core import AliCloudCore
from cloudprovider_grpc.formats import acs_signature as signing


class AcsRpc(AliCloudCore):
    """The RPC entry on `/` over the cloud's state: parsing, routing, signatures, errors."""

    def _add_routes(self) -> None:
        self.route("GET", "/", self._api)
        self.route("POST", "/", self._api)

    def _action_table(self) -> dict[str, tuple[tuple[str, ...], Handler]]:
        """Action -> (the API versions that have it, its handler); the assembled emulator's table."""
        return {}

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
            "RequestId": self._request_id(),
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
        # (the Tea SDK, alibabacloud-tea-openapi 0.4.6, raises ThrottlingException only with that header).
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
                raise fail("Forbidden.Unauthorized")
            body = handler(params, version)
            body.setdefault("RequestId", self._request_id())
            return Response(200, body)
        except AcsError as err:
            return Response(err.status, self._envelope(err.code, err.message), dict(err.headers))

    def _handler(self, action: str, version: str) -> Handler:
        table = self._action_table()
        if not action:
            raise missing("Action")
        entry = table.get(action)
        if entry is None:
            raise fail("InvalidAction.NotFound")
        versions, handler = entry
        if version not in versions:
            raise fail("InvalidVersion")
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
            raise fail("IncompleteSignature")
        if key.token:
            if token != key.token:
                raise fail("InvalidSecurityToken.MismatchWithAccessKey")
            if key.expires_at is not None and time.time() >= key.expires_at:
                raise fail("InvalidSecurityToken.Expired")

    def _key(self, key_id: str) -> AccessKey:
        key = self.keys.get(key_id)
        if key is None:
            raise fail("InvalidAccessKeyId.NotFound")
        return key

    def _check_fresh(self, when: str, nonce: str) -> None:
        ts = parse_time(when)
        if ts is None:
            raise fail("InvalidTimeStamp.Format")
        now = time.time()
        if abs(now - ts) > TIMESTAMP_WINDOW:
            raise fail("InvalidTimeStamp.Expired")
        if not nonce:
            raise fail("MissingSignatureNonce")
        if nonce in self._nonces:
            raise fail("SignatureNonceUsed")
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
            raise fail("IncompleteSignature")
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
                raise missing(name)
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
            raise missing(name)
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
            raise fail("InvalidScalingGroupId.NotFound")
        return g

    @staticmethod
    def _wrap(version: str, name: str, inner: str, items: list[Any]) -> dict[str, Any]:
        return {name: {inner: items} if version == "2014-08-28" else items}
