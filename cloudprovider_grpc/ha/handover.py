"""A leader's hand-over, seen from the caller: no call fails while the Lease changes hands.

Between the moment a leader handing over stops writing (SIGTERM) and the moment its port closes,
cluster-autoscaler's connection still reaches it, and CA does not retry a failed call. So every
call on a leader-elected replica passes `HandOverRelay`, which goes through four phases:

- **local** (the usual case): everything runs here; the relay only counts the write RPCs running,
  so that a hand-over can wait for them.
- **holding** (from the start of a hand-over until a successor answers): reads are answered from
  memory, which is still the truth (this replica stopped writing and the successor has not
  started); writes wait, within the caller's deadline.
- **forwarding** (the successor answers, at the address it published on the Lease): every call,
  the held writes first, goes to the successor over one connection, and its answer (or status) is
  relayed as it is. A forwarded write is executed once, by the successor, under its own term: it
  is never retried here (a call that failed on the way may have been executed; the caller sees
  that status, exactly as if it had called the successor itself). Reads go too: after a forwarded
  write, this replica's memory is no longer the truth.
- **refusing** (no successor answered within the grace period, or it published no address):
  writes answer UNAVAILABLE with nothing recorded, as on a standby; reads are answered here.

With TLS the connection to the successor presents this server's own certificate and key: the
replicas share one certificate, so the successor presents the same one. The successor is verified
against `--tls-ca` (under mutual TLS the same CA signs both sides' certificates), else against the
certificate file itself, and by the name in that certificate (its first DNS name), not by the pod
IP dialled. Under mutual TLS the certificate must allow client authentication as well as server
authentication (the chart's and the kustomize layout's do); without it the successor refuses the
handshake, the relay says so in one log line, and writes are refused as in the refusing phase.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from cloudprovider_grpc.core.errors import ProviderError, Unavailable
from cloudprovider_grpc.tls.files import TLSFileError
from cloudprovider_grpc.tls.settings import TLSSettings

log = logging.getLogger(__name__)

#: the annotation on the Lease naming its holder's gRPC address, set in the same update that
#: acquires or renews the Lease (so it always belongs to the holder it sits beside)
ADDRESS_ANNOTATION = "cloudprovider-grpc/leader-address"
#: metadata on a forwarded call naming the replica that forwarded it
FORWARDED_BY = "cpg-forwarded-by"
#: the RPCs that change the cloud
WRITES = frozenset({"NodeGroupIncreaseSize", "NodeGroupDecreaseTargetSize", "NodeGroupDeleteNodes"})
#: a held call gets its answer this long before its caller's deadline at the latest: UNAVAILABLE
#: (nothing recorded) tells the caller more than DEADLINE_EXCEEDED (unknown)
DEADLINE_MARGIN = 0.1
#: how long the connection to the successor may take to open before the relay gives up on it
CONNECT_TIMEOUT = 2.0

R = TypeVar("R")


class Phase(enum.Enum):
    LOCAL = "local"
    HOLDING = "holding"
    FORWARDING = "forwarding"
    REFUSING = "refusing"


class Relayed(ProviderError):
    """The successor's status for a forwarded call, passed on as it is."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def certificate_name(cert_pem: bytes) -> str:
    """The first DNS name of a PEM certificate (else its first IP address, else its common name).

    Read with the `cryptography` package's public X.509 parser: the standard library decodes a
    certificate's fields only through a private test helper."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = None
    if names is not None:
        for kind in (x509.DNSName, x509.IPAddress):
            found = names.get_values_for_type(kind)
            if found:
                return str(found[0])
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common[0].value) if common else ""


class HandOverRelay:
    """The phases above, for one replica. `service` is the full gRPC service name; `identity` the
    replica's (sent with each forwarded call); `tls` the server's TLS settings (None or disabled:
    plaintext); `on_forwarding` is called once when forwarding starts (the compiled front stops
    answering from its cache then, so that every read reaches the relay)."""

    def __init__(
        self,
        service: str,
        identity: str,
        tls: TLSSettings | None = None,
        on_forwarding: Callable[[], None] = lambda: None,
    ) -> None:
        self._service = service
        self._identity = identity
        self._tls = tls if tls is not None and tls.enabled else None
        self.on_forwarding = on_forwarding
        self._cond = threading.Condition(threading.Lock())
        #: read without the lock by the RPC path: a read that sees LOCAL a moment after the change
        #: is still answered right (see `call`)
        self.phase = Phase.LOCAL
        self._writing = 0
        self._until = 0.0  # the hand-over's deadline (monotonic)
        self._why_refusing = ""
        self._channel: grpc.Channel | None = None
        self._successor = ""
        self._methods: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self.forwarded = 0

    @property
    def engaged(self) -> bool:
        """A hand-over began: reads too must ask the relay."""
        return self.phase is not Phase.LOCAL

    # ------------------------------------------------------------------ the RPC's side
    def call(self, method: str, raw: bytes, context: grpc.ServicerContext, run: Callable[[], R]) -> R | bytes:
        """Run the call here (`run()`), or hold it, or forward it; see the module docstring."""
        write = method in WRITES
        with self._cond:
            if self.phase is Phase.LOCAL:
                if not write:
                    local = True
                else:
                    self._writing += 1
                    local = False
            elif write and self.phase is Phase.HOLDING:
                self._cond.wait_for(lambda: self.phase is not Phase.HOLDING, self._budget(context))
                local = None
            else:
                local = None
            phase = self.phase
        if local is True:
            return run()
        if local is False:  # a write run here, counted until it is done
            try:
                return run()
            finally:
                with self._cond:
                    self._writing -= 1
                    if self._writing == 0:
                        self._cond.notify_all()
        if phase is Phase.FORWARDING:
            return self._forward(method, raw, context)
        if not write:
            return run()  # a read while holding or refusing: memory is the truth
        if phase is Phase.HOLDING:
            raise Unavailable(
                f"{method}: this replica is handing the leadership over and the next leader did not "
                "answer within the call's deadline; nothing was recorded: call again"
            )
        raise Unavailable(
            f"{method}: this replica handed the leadership over ({self._why_refusing}); nothing was "
            "recorded: call the leader's Service"
        )

    def _budget(self, context: grpc.ServicerContext) -> float:
        left = self._until - time.monotonic()
        remaining = context.time_remaining()
        if remaining is not None:
            left = min(left, remaining - DEADLINE_MARGIN)
        return max(0.0, left)

    def _forward(self, method: str, raw: bytes, context: grpc.ServicerContext) -> bytes:
        stub = self._methods.get(method)
        if stub is None:
            assert self._channel is not None
            stub = self._channel.unary_unary(f"/{self._service}/{method}", _same, _same)
            self._methods[method] = stub
        remaining = context.time_remaining()
        timeout = max(0.0, self._until - time.monotonic()) if remaining is None else remaining
        try:
            answer: bytes = stub(raw, timeout=timeout, metadata=((FORWARDED_BY, self._identity),))
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNAVAILABLE
            details = (exc.details() if hasattr(exc, "details") else "") or ""
            raise Relayed(code, f"{details} (forwarded to the next leader at {self._successor})") from None
        with self._cond:
            self.forwarded += 1
        return answer

    # ------------------------------------------------------------------ the hand-over's side
    def hold(self, until: float) -> None:
        """The hand-over begins: no write starts here any more; returns once the writes already
        running here are done (or at the monotonic `until`)."""
        with self._cond:
            self._until = until
            self.phase = Phase.HOLDING
            self._cond.wait_for(lambda: self._writing == 0, max(0.0, until - time.monotonic()))

    def forward_to(self, address: str) -> bool:
        """The successor answers at `address`: open the connection, then forward every call.
        False (and refusing) when the connection cannot be opened."""
        try:
            channel = self._open(address)
            grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT)
        except (grpc.FutureTimeoutError, TLSFileError, ValueError) as exc:
            why = str(exc) or f"no connection within {CONNECT_TIMEOUT:g}s"
            self.refuse(f"the next leader at {address} could not be reached: {why}")
            log.error(
                "hand-over: cannot reach the next leader at %s (%s); writes that reach this replica are "
                "refused until it stops%s",
                address,
                why,
                "; under mutual TLS the certificate must allow client authentication" if self._tls else "",
            )
            return False
        self.on_forwarding()  # first: no answer forwarded from now on is cached by the front
        with self._cond:
            self._channel, self._successor = channel, address
            self.phase = Phase.FORWARDING
            self._cond.notify_all()
        log.info("hand-over: calls that reach this replica are forwarded to the next leader at %s", address)
        return True

    def refuse(self, why: str) -> None:
        with self._cond:
            if self.phase is Phase.FORWARDING:
                return
            self._why_refusing = why
            self.phase = Phase.REFUSING
            self._cond.notify_all()

    def close(self) -> None:
        """After the port closed: the connection to the successor goes too."""
        with self._cond:
            channel, self._channel = self._channel, None
            self._methods = {}
        if channel is not None:
            channel.close()
        if self.forwarded:
            log.info("hand-over: %d calls were forwarded to the next leader", self.forwarded)

    def _open(self, address: str) -> grpc.Channel:
        if self._tls is None:
            return grpc.insecure_channel(address)
        files = self._tls.load()
        credentials = grpc.ssl_channel_credentials(
            root_certificates=files.ca or files.cert, private_key=files.key, certificate_chain=files.cert
        )
        name = certificate_name(files.cert)
        options = [("grpc.ssl_target_name_override", name)] if name else []
        return grpc.secure_channel(address, credentials, options=options)


def _same(raw: bytes) -> bytes:
    """Requests and answers pass through as the bytes they are."""
    return raw


def advertised_address(host: str, port: int) -> str:
    """Where other replicas reach this one's gRPC port: the host it listens on when that names one,
    else the pod's IP (POD_IP, from the downward API), else "" (a hand-over then refuses writes)."""
    if host not in ("", "[::]", "0.0.0.0", "::"):
        return f"{host}:{port}"
    pod_ip = os.environ.get("POD_IP", "").strip()
    if not pod_ip:
        return ""
    return f"[{pod_ip}]:{port}" if ":" in pod_ip else f"{pod_ip}:{port}"


__all__ = [
    "ADDRESS_ANNOTATION",
    "FORWARDED_BY",
    "WRITES",
    "HandOverRelay",
    "Phase",
    "Relayed",
    "advertised_address",
    "certificate_name",
]
