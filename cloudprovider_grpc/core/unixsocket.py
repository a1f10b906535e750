"""The gRPC port as a unix socket (`unix:///PATH` or `unix:/PATH`): what an address must look like,
and the socket file's life on disk.

Why a socket at all: in a sidecar, a socket in a volume only cluster-autoscaler's container and ours
mount is reachable by those two containers alone, where loopback TCP is reachable by every container
of the pod (and with `hostNetwork: true` by every process on the node).

The address rules are cluster-autoscaler's: its externalgrpc client splits the address with
`net.SplitHostPort` (host `unix`, "port" `///PATH`), which fails on a second `:`, and hands the whole
address to `grpc.Dial`, whose `unix` resolver takes `unix:///ABSOLUTE` and `unix:/ABSOLUTE` alike
(kubernetes/autoscaler cluster-autoscaler-1.36.1,
cluster-autoscaler/cloudprovider/externalgrpc/externalgrpc_cloud_provider.go:372,409; grpc-go
internal/resolver/unix/unix.go). The path limit is Linux's: `sun_path` holds 108 bytes with the
terminating NUL (unix(7)).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from cloudprovider_grpc.core.errors import ConfigError, ServerStartError

#: the longest unix socket path Linux accepts, in bytes (sun_path's 108 with the NUL)
MAX_SOCKET_PATH = 107
#: the socket file's default mode: its owner and group (the pod's fsGroup in a sidecar), nobody else
DEFAULT_MODE = 0o660
#: how long the check for a live server at the path waits for an answer to connect()
PROBE_TIMEOUT = 1.0

EXAMPLE = "unix:///run/cloudprovider-grpc/grpc.sock"


def is_unix(address: str) -> bool:
    return address.startswith("unix:")


def socket_path(address: str) -> Path:
    """The absolute path of a `unix:` address; ValueError (one line) when CA could not dial it."""
    rest = address[len("unix:") :]
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if authority:
            raise ValueError(f"{address!r} names a host ({authority!r}); write {EXAMPLE} (three slashes)")
        path = slash + path
    else:
        path = rest
    if not path.startswith("/"):
        raise ValueError(f"{address!r}: the socket path must be absolute, e.g. {EXAMPLE}")
    if ":" in path:
        raise ValueError(
            f"{address!r}: the socket path must not contain ':' (cluster-autoscaler splits the address "
            "at ':' and would refuse it)"
        )
    if "\0" in path:
        raise ValueError(f"{address!r}: the socket path contains a NUL byte")
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        raise ValueError(
            f"{address!r}: the socket path is {size} bytes long, over the {MAX_SOCKET_PATH} a unix "
            "socket allows"
        )
    if path.endswith("/"):
        raise ValueError(f"{address!r}: the socket path names a directory; add a file name (grpc.sock)")
    return Path(path)


def _answers(path: Path) -> bool:
    """True when a server accepts connections on the socket at `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def claim(path: Path) -> None:
    """Make `path` free for a new socket, before anything binds it: the directory must exist and be
    writable; a socket nobody answers on (a previous run that was killed) is removed; a socket a live
    server answers on is refused (ServerStartError, as for a TCP port in use), and so is anything else
    at the path (ConfigError). Each refusal is one line naming the path."""
    directory = path.parent
    if not directory.is_dir():
        raise ConfigError(
            "address", f"the socket's directory {directory} does not exist or is not a directory"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError("address", f"the socket's directory {directory} is not writable by this process")
    clear_stale(path)


def clear_stale(path: Path) -> None:
    """Remove a socket at `path` nobody answers on; refuse a live one or anything that is no socket."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError("address", f"cannot inspect {path}: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError("address", f"{path} is a directory, not a socket; name a file inside it")
    if not stat.S_ISSOCK(mode):
        raise ConfigError("address", f"{path} exists and is not a socket; refusing to replace it")
    if _answers(path):
        raise ServerStartError(f"cannot listen on unix:{path}: another server is listening on it")
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError("address", f"cannot remove the stale socket {path}: {exc.strerror}") from None


@contextlib.contextmanager
def created_with(mode: int) -> Iterator[None]:
    """The process umask for a socket bound inside: the file never exists with wider permissions than
    `mode`, not even between bind() and a chmod. Only at startup, before other threads create files."""
    old = os.umask(0o777 & ~mode)
    try:
        yield
    finally:
        os.umask(old)


def inode(path: Path) -> int | None:
    """The socket's inode once bound (what `remove` checks), None when it is not there."""
    try:
        return path.lstat().st_ino
    except OSError:
        return None


def remove(path: Path, ino: int | None) -> None:
    """Remove the socket at shutdown, only when it is still the one this server bound (`ino`)."""
    if ino is None:
        return
    with contextlib.suppress(OSError):
        if path.lstat().st_ino == ino:
            path.unlink()
