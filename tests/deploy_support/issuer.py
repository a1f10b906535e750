"""Plays cert-manager's part in tests: the Secrets the Certificates of a rendered manifest would yield.

No cluster and no cert-manager run here, so `issue()` signs what the Certificates ask for, the way
cert-manager's selfSigned and CA issuers do (each Secret holds `tls.crt`, `tls.key` and `ca.crt`,
the issuing CA). The server can then be started with exactly the files the pod would mount. The
objects themselves are validated against cert-manager's own CRDs (tests/deploy_support/crds.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


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
