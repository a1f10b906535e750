"""cert-manager stand-ins: a schema for the two CRDs we use, and a tiny issuer.

kubernetes-validate only knows built-in kinds, so cert-manager.io/v1 Issuer and Certificate are
checked against the schema below, written from cert-manager's API reference
(https://cert-manager.io/docs/reference/api-docs/, `CertificateSpec`, `IssuerSpec`,
`CertificatePrivateKey`, `KeyUsage`). It covers the fields our manifests use and rejects unknown
ones, so a typo (`dnsName`, `usage`) fails instead of being dropped by the API server's pruning.

`issue()` plays cert-manager's part for tests: it produces the Secrets (`tls.crt`, `tls.key`,
`ca.crt`) that the Certificates in a rendered manifest would yield, so the server can be started
with exactly the files the pod would mount.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import jsonschema
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# cert-manager KeyUsage values (api-docs: "KeyUsage (string alias)").
KEY_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
    "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
]  # fmt: skip

_GO_DURATION = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"

_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}

_ISSUER_REF = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "kind": {"enum": ["Issuer", "ClusterIssuer"]},
        "group": {"type": "string"},
    },
    "additionalProperties": False,
}

CERTIFICATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "cert-manager.io/v1"},
        "kind": {"const": "Certificate"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "required": ["secretName", "issuerRef"],
            "properties": {
                "secretName": {"type": "string"},
                "issuerRef": _ISSUER_REF,
                "commonName": {"type": "string", "maxLength": 64},
                "dnsNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "ipAddresses": {"type": "array", "items": {"type": "string"}},
                "isCA": {"type": "boolean"},
                "duration": {"type": "string", "pattern": _GO_DURATION},
                "renewBefore": {"type": "string", "pattern": _GO_DURATION},
                "usages": {"type": "array", "items": {"enum": KEY_USAGES}},
                "privateKey": {
                    "type": "object",
                    "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "encoding": {"enum": ["PKCS1", "PKCS8"]},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

ISSUER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "cert-manager.io/v1"},
        "kind": {"const": "Issuer"},
        "metadata": _METADATA,
        "spec": {
            "type": "object",
            "properties": {
                "selfSigned": {"type": "object", "additionalProperties": False},
                "ca": {
                    "type": "object",
                    "required": ["secretName"],
                    "properties": {"secretName": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

SCHEMAS = {"Certificate": CERTIFICATE_SCHEMA, "Issuer": ISSUER_SCHEMA}


def is_cert_manager(obj: dict[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).startswith("cert-manager.io/")


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless obj is a valid Issuer/Certificate as we use them."""
    schema = SCHEMAS.get(obj.get("kind", ""))
    if schema is None:
        raise jsonschema.ValidationError(f"no schema for cert-manager kind {obj.get('kind')!r}")
    jsonschema.Draft202012Validator(schema).validate(obj)


def _parse_hours(duration: str | None, default_hours: int) -> dt.timedelta:
    if not duration:
        return dt.timedelta(hours=default_hours)
    if not duration.endswith("h"):
        raise ValueError(f"test issuer only understands whole hours, got {duration!r}")
    return dt.timedelta(hours=int(duration[:-1]))


_EKU = {"server auth": ExtendedKeyUsageOID.SERVER_AUTH, "client auth": ExtendedKeyUsageOID.CLIENT_AUTH}


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _sign(
    spec: dict[str, Any],
    key: ec.EllipticCurvePrivateKey,
    issuer_cert: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spec.get("commonName", "cert"))])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + _parse_hours(spec.get("duration"), 2160))
    )
    is_ca = bool(spec.get("isCA"))
    builder = builder.add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    if spec.get("dnsNames"):
        sans = [x509.DNSName(n) for n in spec["dnsNames"]]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    ekus = [_EKU[u] for u in spec.get("usages", []) if u in _EKU]
    if ekus:
        builder = builder.add_extension(x509.ExtendedKeyUsage(ekus), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def issue(objects: list[dict[str, Any]]) -> dict[str, dict[str, bytes]]:
    """Secrets (name -> key -> bytes) that cert-manager would write for the Certificates given.

    Supports what our manifests use: selfSigned Issuers, CA Issuers backed by a Certificate's
    Secret, and leaf Certificates with dnsNames and server/client usages.
    """
    issuers = {o["metadata"]["name"]: o["spec"] for o in objects if o.get("kind") == "Issuer"}
    certs = [o for o in objects if o.get("kind") == "Certificate"]
    secrets: dict[str, dict[str, bytes]] = {}
    keys: dict[str, tuple[x509.Certificate, ec.EllipticCurvePrivateKey]] = {}

    pending = list(certs)
    while pending:
        progressed = False
        for cert in list(pending):
            spec = cert["spec"]
            issuer = issuers[spec["issuerRef"]["name"]]
            key = ec.generate_private_key(ec.SECP256R1())
            if "selfSigned" in issuer:
                signed = _sign(spec, key, None, key)
                ca_pem = signed.public_bytes(serialization.Encoding.PEM)
            elif issuer["ca"]["secretName"] in keys:
                ca_cert, ca_key = keys[issuer["ca"]["secretName"]]
                signed = _sign(spec, key, ca_cert, ca_key)
                ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
            else:
                continue
            keys[spec["secretName"]] = (signed, key)
            secrets[spec["secretName"]] = {
                "tls.crt": signed.public_bytes(serialization.Encoding.PEM),
                "tls.key": _pem_key(key),
                "ca.crt": ca_pem,
            }
            pending.remove(cert)
            progressed = True
        if not progressed:
            raise ValueError(f"unresolvable issuers for {[c['metadata']['name'] for c in pending]}")
    return secrets
