"""The server's TLS settings (`tls:` in the configuration): which files, checked as they are read, so
a wrong certificate is reported at start with the setting that names it, not at the first handshake.
They sit beside the code that loads the files; the configuration holds them as one of its parts."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, model_validator

from cloudprovider_grpc.tls.files import TLSFileError, TLSFiles, load_tls_files


class TLSSettings(BaseModel):
    """Server certificate, key and (for mutual TLS) the CA that signs client certificates: the same
    triple CA's cloud-config names `cert`/`key`/`cacert` on the client side."""

    model_config = ConfigDict(extra="forbid")

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None

    @model_validator(mode="after")
    def _complete(self) -> TLSSettings:
        if (self.cert is None) != (self.key is None):
            raise ValueError("cert and key must be given together")
        if self.ca is not None and self.cert is None:
            raise ValueError("ca (client verification) needs cert and key too")
        for name in ("cert", "key", "ca"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name}: file {str(path)!r} does not exist")
        if self.cert is not None and self.key is not None:
            try:  # readable, PEM, and the key belongs to the certificate: found now, not at the handshake
                load_tls_files(self.cert, self.key, self.ca)
            except TLSFileError as exc:
                raise ValueError(str(exc)) from None
        return self

    @property
    def enabled(self) -> bool:
        return self.cert is not None

    def load(self) -> TLSFiles:
        """The files read and pair-checked now (TLSFileError names the one at fault). Only for a
        configuration with TLS on: cert and key are always given together."""
        if self.cert is None or self.key is None:
            raise TLSFileError("cert", "TLS is not configured")
        return load_tls_files(self.cert, self.key, self.ca)
