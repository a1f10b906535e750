"""Every request to the Exoscale emulator passes here: the EXO2-HMAC-SHA256 signature checked over
exactly what was received, the key's allowed operations and the IAM deny rules (each route is behind
its OperationId, the name IAM policies use), the error body, and what happens to an answer on its
way out (a gateway losing it, the observer that validates it). Kept apart from the cloud's state
(core.py) and the handlers (api.py) so that access rules read in one place."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from typing import Any

from cloudprovider_grpc.emulators import HttpProblem, Request, Response
from cloudprovider_grpc.emulators.exoscale.core import ExoscaleCore
from cloudprovider_grpc.formats.exoscale_signature import AUTH_SCHEME, sign

#: what an in-tree key needs (cloudprovider/exoscale/README.md) plus our discovery calls
SKS_OPERATIONS = frozenset(
    {
        "evict-sks-nodepool-members",
        "get-instance",
        "get-instance-pool",
        "get-operation",
        "get-quota",
        "list-sks-clusters",
        "scale-sks-nodepool",
        "list-instances",
        "get-instance-type",
    }
)
POOL_OPERATIONS = frozenset(
    {
        "evict-instance-pool-members",
        "get-instance",
        "get-instance-pool",
        "get-operation",
        "get-quota",
        "scale-instance-pool",
        "list-instance-pools",
        "list-instances",
        "get-instance-type",
    }
)


class ExoscaleGateway(ExoscaleCore):
    """Authentication, IAM and the answer's way out, over the cloud's state."""

    def operation_of(self, method: str, path: str) -> str:
        """The OperationId (IAM name) a request's method and path address ("" if none)."""
        for m, regex, op in self._operation_routes:
            if m == method and regex.match(path):
                return op
        return ""

    def error_body(self, status: int, message: str) -> Any:
        return {"message": message}

    def _deny(self, message: str) -> HttpProblem:
        return HttpProblem(self.auth_failure_status, message)

    def authenticate(self, request: Request) -> str:
        """Verify the EXO2-HMAC-SHA256 signature over exactly what was received; the caller's key."""
        header = request.headers.get("Authorization") or ""
        scheme, _, rest = header.partition(" ")
        if scheme != AUTH_SCHEME:
            raise self._deny("missing or malformed Authorization header (expected EXO2-HMAC-SHA256)")
        pragmas: dict[str, str] = {}
        for part in rest.split(","):
            name, sep, value = part.strip().partition("=")
            if not sep or name in pragmas:
                raise self._deny("malformed Authorization header")
            pragmas[name] = value
        key = pragmas.get("credential", "")
        secret = self.keys.get(key)
        if secret is None:
            raise self._deny("invalid API key")
        try:
            expires = int(pragmas.get("expires", ""))
        except ValueError:
            raise self._deny("malformed Authorization header: expires is not a timestamp") from None
        if expires < self.signature_clock():
            raise self._deny("request signature expired")
        names = [n for n in pragmas.get("signed-query-args", "").split(";") if n]
        unsigned = sorted(set(request.query) - set(names))
        if unsigned:
            raise self._deny(f"query parameter {unsigned[0]!r} is not signed")
        # the signed values in the pragma's order (clients list the names sorted), single values only
        values = "".join(v[0] for n in names if len(v := request.query.get(n, [])) == 1)
        message = b"\n".join(
            [
                f"{request.method} {request.path}".encode(),
                request.body,
                values.encode(),
                b"",
                str(expires).encode(),
            ]
        )
        if not hmac.compare_digest(sign(secret, message), pragmas.get("signature", "")):
            raise self._deny("invalid request signature")
        return key

    def _iam(self, op: str, handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def checked(req: Request) -> Response:
            allowed = self.allowed.get(req.principal)
            if allowed is not None and op not in allowed:
                raise HttpProblem(403, f"Forbidden: the API key is not allowed to perform operation {op}")
            denied = self._denied_resource(req)
            if denied:
                raise HttpProblem(403, f"Forbidden: the IAM policy denies operation {op} on {denied}")
            return handler(req)

        return checked

    def _denied_resource(self, req: Request) -> str:
        """The id of a denied resource the request names ("" if none)."""
        if not self.denied_resources:
            return ""
        named = set(re.split(r"[/:]", req.path)) | {req.arg("manager-id") or ""}
        covered = set(self.denied_resources)
        covered |= {np["pool"] for npid, np in self.nodepools.items() if npid in covered}
        return next(iter(sorted(named & covered)), "")

    def _dispatch(self, req: Request) -> Response:
        resp = super()._dispatch(req)
        if req.method == "PUT" and resp.status == 200 and self.lose_next_answers > 0:
            with self.lock:
                self.lose_next_answers -= 1
            resp = Response(502, self.error_body(502, "Bad Gateway"))
        if self.observer is not None:
            self.observer(req, resp)
        return resp
