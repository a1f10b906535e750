"""The server's certificate files, re-read when they change (TLS and mTLS on the gRPC port).

Why a module of its own: Python serving the port hands these credentials to grpcio; with the compiled
front, Python validates the files once at start (a clear error before anything listens) and the front
loads and re-reads them itself.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import grpc

from cloudprovider_grpc.core.errors import ServerStartError
from cloudprovider_grpc.tls.files import TLSFileError, TLSFiles
from cloudprovider_grpc.tls.settings import TLSSettings

log = logging.getLogger(__name__)


class CertReloader:
    """Serves the current certificate files to gRPC core, which asks on every new handshake.

    Re-reads the files when their modification times change (Kubernetes swaps Secret volumes
    atomically). A changed set that does not load or whose key does not belong to its certificate (a
    rotation half done, a wrong file) is rejected once, with an error naming the file, and the
    previous pair stays in use, so a bad rotation never breaks handshakes."""

    def __init__(self, tls: TLSSettings) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._rejected: tuple[int, ...] | None = None
        try:
            self.files = self._read()
        except TLSFileError as exc:
            raise ServerStartError(f"TLS {exc}") from None
        self.config = self._configuration(self.files)

    @property
    def paths(self) -> list[Path]:
        return self._paths()

    def _paths(self) -> list[Path]:
        return [p for p in (self._tls.cert, self._tls.key, self._tls.ca) if p is not None]

    def _stat(self) -> tuple[int, ...]:
        try:
            return tuple(os.stat(p).st_mtime_ns for p in self._paths())
        except OSError:
            return ()

    def _read(self) -> TLSFiles:
        return self._tls.load()

    @staticmethod
    def _configuration(files: TLSFiles) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(files.key, files.cert)], root_certificates=files.ca
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        files = self.fetch_files()
        return None if files is None else self._configuration(files)

    def fetch_files(self) -> TLSFiles | None:
        """The changed files once loaded and checked, else None (unchanged, or rejected and logged).
        grpcio asks through fetch() on every new handshake."""
        stamp = self._stat()
        if not stamp or stamp == self._stamp or stamp == self._rejected:
            return None
        with self._lock:
            if stamp in (self._stamp, self._rejected):
                return None
            try:
                files = self._read()
            except TLSFileError as exc:
                self._rejected = stamp
                log.error("changed TLS files rejected, the previous certificate stays in use: %s", exc)
                return None
            self._stamp = stamp
        log.info("TLS certificate files changed and were loaded; new handshakes use them")
        self.files = files
        return files

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.config, self.fetch, require_client_authentication=self._tls.ca is not None
        )
