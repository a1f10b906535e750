"""Exoscale API v2 request signatures, shared by the client that signs and the emulator that checks.

Requests are signed with EXO2-HMAC-SHA256 (openapi-v2.exoscale.com, topic "API request signature";
requests-exoscale-auth `ExoscaleV2Auth`): the message is `METHOD path`, the body bytes exactly as
sent, the values of the signed query parameters, the (empty) signed headers and the expiry, joined
by newlines; the signature is base64(HMAC-SHA256(secret, message)).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import parse_qs, urlsplit

#: how long a signature stays valid; every Exoscale client uses now + 10 minutes
SIGNATURE_TTL = 600
AUTH_SCHEME = "EXO2-HMAC-SHA256"


def signature_message(
    method: str, path: str, body: bytes, query: str, expires: int
) -> tuple[bytes, list[str]]:
    """The bytes to sign and the names of the signed query parameters (sorted, single-valued
    values concatenated, blank ones dropped: what requests-exoscale-auth and egoscale v2 do)."""
    params = parse_qs(query)
    names = sorted(params)
    values = "".join(params[n][0] for n in names if len(params[n]) == 1)
    parts = [f"{method.upper()} {path}".encode(), body, values.encode(), b"", str(expires).encode()]
    return b"\n".join(parts), names


def sign(secret: str, message: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()


def authorization(key: str, secret: str, method: str, url: str, body: bytes, expires: int) -> str:
    """The Authorization header value for one request."""
    parts = urlsplit(url)
    message, names = signature_message(method, parts.path, body, parts.query, expires)
    header = f"{AUTH_SCHEME} credential={key}"
    if names:
        header += f",signed-query-args={';'.join(names)}"
    return f"{header},expires={expires},signature={sign(secret, message)}"
