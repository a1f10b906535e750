"""Alibaba Cloud request signatures: V3 (ACS3-HMAC-SHA256), which our client sends, and V1
(HMAC-SHA1, RPC style), which the emulator also verifies because older clients (the in-tree Go
provider, aliyun-python-sdk-core) still send it.

Facts (vendor doc "V3 request structure and signature",
https://www.alibabacloud.com/help/en/sdk/product-overview/v3-request-structure-and-signature; the Tea SDK's
alibabacloud_tea_openapi.utils, read to confirm):
- percent-encoding is RFC 3986: everything but `A-Za-z0-9-_.~` is escaped, so a space is `%20`,
  `*` is `%2A` and `~` stays;
- V3: canonical request = METHOD, path, sorted canonical query, `name:value` lines of the signed
  headers (lower-case, sorted, values trimmed), the `;`-joined header names, hex SHA-256 of the body;
  string to sign = `ACS3-HMAC-SHA256\\n` + hex SHA-256 of it; signature = hex HMAC-SHA256 with the
  AccessKey secret; sent as `Authorization: ACS3-HMAC-SHA256 Credential=<id>,SignedHeaders=...,
  Signature=...`;
- V1: every parameter but `Signature`, sorted and encoded, joined with `&`; string to sign =
  METHOD `&` enc("/") `&` enc(that string); signature = base64 HMAC-SHA1 with key `<secret>&`.

We send V3: it is the vendor's current scheme and the official SDKs' default, it signs the headers
and the body hash (V1 signs only the parameters), and it uses SHA-256 instead of SHA-1.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

V3_ALGORITHM = "ACS3-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def percent_encode(value: str) -> str:
    """RFC 3986 encoding as Alibaba Cloud canonicalises it."""
    return quote(value, safe="~", encoding="utf-8")


def canonical_query(params: Iterable[tuple[str, str]]) -> str:
    """Sorted `key=value` pairs, both encoded, joined with `&` (V3 canonical query)."""
    pairs = sorted((percent_encode(k), percent_encode(v)) for k, v in params)
    return "&".join(f"{k}={v}" for k, v in pairs)


def canonical_headers(headers: Mapping[str, str], names: Iterable[str]) -> tuple[str, str]:
    """(`name:value\\n` lines, `;`-joined names) for the signed headers, names lower-cased and sorted."""
    lowered = {k.lower(): v for k, v in headers.items()}
    signed = sorted({n.lower() for n in names})
    lines = "".join(f"{n}:{lowered.get(n, '').strip()}\n" for n in signed)
    return lines, ";".join(signed)


def v3_string_to_sign(
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    headers: Mapping[str, str],
    signed_headers: Iterable[str],
    body_sha256: str,
) -> str:
    lines, names = canonical_headers(headers, signed_headers)
    request = "\n".join([method.upper(), path or "/", canonical_query(query), lines, names, body_sha256])
    return f"{V3_ALGORITHM}\n{hashlib.sha256(request.encode()).hexdigest()}"


def v3_signature(secret: str, string_to_sign: str) -> str:
    return hmac.new(secret.encode(), string_to_sign.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class V3Authorization:
    """A parsed `Authorization: ACS3-HMAC-SHA256 ...` header."""

    access_key_id: str
    signed_headers: tuple[str, ...]
    signature: str

    @classmethod
    def parse(cls, header: str) -> V3Authorization | None:
        algorithm, _, rest = header.strip().partition(" ")
        if algorithm != V3_ALGORITHM:
            return None
        fields: dict[str, str] = {}
        for part in rest.split(","):
            key, sep, value = part.strip().partition("=")
            if sep:
                fields[key] = value
        if not {"Credential", "SignedHeaders", "Signature"} <= fields.keys():
            return None
        names = tuple(n for n in fields["SignedHeaders"].split(";") if n)
        return cls(fields["Credential"], names, fields["Signature"])

    def header(self) -> str:
        return (
            f"{V3_ALGORITHM} Credential={self.access_key_id},"
            f"SignedHeaders={';'.join(self.signed_headers)},Signature={self.signature}"
        )


def v1_string_to_sign(method: str, params: Iterable[tuple[str, str]]) -> str:
    canonical = canonical_query((k, v) for k, v in params if k != "Signature")
    return f"{method.upper()}&{percent_encode('/')}&{percent_encode(canonical)}"


def v1_signature(secret: str, string_to_sign: str) -> str:
    digest = hmac.new(f"{secret}&".encode(), string_to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
