"""Throwaway PKI for TLS tests: a CA, a server certificate for localhost/127.0.0.1, a client
certificate, and a client certificate from an unrelated CA."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    cn: str,
    *,
    server: bool,
    groups: Sequence[str] = (),
    names: Sequence[str] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate signed by `ca`. `groups` become Organization entries, which is where
    Kubernetes reads a client certificate's groups from (CN is the user name). A server's
    certificate names localhost and 127.0.0.1, and `names` (DNS names or IP addresses) besides."""
    ca_key, ca_cert = ca
    key = _key()
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            # a server's certificate authenticates it as a client too: a replica handing over
            # forwards calls to its successor with it (cloudprovider_grpc/ha/handover.py)
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                + [_general_name(name) for name in names]
            ),
            critical=False,
        )
    return key, builder.sign(ca_key, hashes.SHA256())


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


@dataclass
class Pki:
    dir: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path

    def read(self, name: str) -> bytes:
        return getattr(self, name if name != "ca" else "ca").read_bytes()


def write_pki(directory: Path, server_cn: str = "localhost", server_names: Sequence[str] = ()) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca("cloudprovider-grpc test CA")
    rogue_ca = make_ca("some other CA")
    files: dict[str, bytes] = {"ca.crt": pem(ca[1])}
    for stem, (key, cert) in {
        "server": issue(ca, server_cn, server=True, names=server_names),
        "client": issue(ca, "cluster-autoscaler", server=False),
        "rogue": issue(rogue_ca, "cluster-autoscaler", server=False),
    }.items():
        files[f"{stem}.crt"] = pem(cert)
        files[f"{stem}.key"] = pem_key(key)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    d = directory
    return Pki(
        d,
        d / "ca.crt",
        d / "server.crt",
        d / "server.key",
        d / "client.crt",
        d / "client.key",
        d / "rogue.crt",
        d / "rogue.key",
    )
