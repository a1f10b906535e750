"""Loading and checking the server's TLS files: certificate, private key and (mutual TLS) client CA.

One check for `check-config`, startup and every rotation: each file is read, parsed as PEM, and the
key must belong to the certificate. grpcio itself only says "could not load" without naming the file,
and a rotated pair that does not match would break every new handshake, so a mismatch is refused
with the name of the offending setting and, during a rotation, the previous pair stays in use.
Python's own `ssl` module (OpenSSL) does the parsing: no extra dependency.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path


class TLSFileError(Exception):
    """`setting` ("cert", "key" or "ca") names the file at fault; the message never holds key material."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


@dataclass(frozen=True)
class TLSFiles:
    cert: bytes
    key: bytes
    ca: bytes | None


def _read(setting: str, path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TLSFileError(setting, f"cannot read {path}: {exc.strerror or exc}") from None


def _no_password() -> bytes:
    raise TLSFileError("key", "is encrypted; give an unencrypted PEM key")


def load_tls_files(cert: Path, key: Path, ca: Path | None) -> TLSFiles:
    """Read and check the files; raise TLSFileError naming the first bad one."""
    cert_pem, key_pem = _read("cert", cert), _read("key", key)
    ca_pem = _read("ca", ca) if ca is not None else None
    for setting, path, data in (("cert", cert, cert_pem), ("ca", ca, ca_pem)):
        if data is None:
            continue
        try:
            ssl.create_default_context(cadata=data.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError):
            raise TLSFileError(setting, f"{path} holds no PEM certificate") from None
    if b"PRIVATE KEY-----" not in key_pem:
        raise TLSFileError("key", f"{key} holds no PEM private key")
    # load_cert_chain wants files: the bytes just read go to a private temporary file, so a rotation
    # between our read and OpenSSL's cannot mix two pairs
    fd, tmp = tempfile.mkstemp(prefix="tls-check-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert_pem + b"\n" + key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(tmp, password=_no_password)
        except ssl.SSLError as exc:
            if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
                raise TLSFileError("key", f"{key} does not belong to the certificate in {cert}") from None
            raise TLSFileError("key", f"{key} is not a usable PEM private key ({exc.reason})") from None
    finally:
        os.unlink(tmp)
    return TLSFiles(cert_pem, key_pem, ca_pem)
