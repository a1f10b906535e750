"""The gRPC port as a unix socket (`--address unix:///PATH`), over the real socket: every RPC, health
and reflection answered through it with the compiled front and without, with TLS as CA dials it
(server name `unix`); the socket's mode; a second server on a live socket refused, a stale one
replaced, a front that died restarted on it; the file removed after SIGTERM; every bad path one line
and exit 2."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from cloudprovider_grpc.config.settings import Settings, load_settings
from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.core.unixsocket import MAX_SOCKET_PATH
from cloudprovider_grpc.grpcapi.wire import SERVICE_NAME
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.registry import ProviderContext, build_provider
from cloudprovider_grpc.server.assembly import ServerHandle, ServerStartError, start_server
from tests.support.certs import Pki, write_pki
from tests.support.front import children, gone, serve
from tests.support.ports import free_port
from tests.support.servers import stub
from tests.support.waits import poll

pytestmark = pytest.mark.integration

METHODS = pb.DESCRIPTOR.services_by_name["CloudProvider"].methods
REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A fresh directory with a short path (pytest's tmp_path can exceed a socket path's limit)."""
    short = Path(tempfile.mkdtemp(prefix="cpg-sock-", dir="/tmp"))
    yield short
    shutil.rmtree(short, ignore_errors=True)


def unix_channel(path: Path, pki: Pki | None = None, *, form: str = "unix://") -> grpc.Channel:
    """A channel to the socket at `path`; with TLS, verifying the server name `unix`, as CA does."""
    target = f"{form}{path}"
    if pki is None:
        return grpc.insecure_channel(target)
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.read("ca"),
        private_key=pki.read("client_key"),
        certificate_chain=pki.read("client_cert"),
    )
    return grpc.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "unix")])


def serving(ch: grpc.Channel) -> bool:
    try:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError:
        return False
    return resp.status == health_pb2.HealthCheckResponse.SERVING


def socket_server(path: Path, front: str, pki: Pki | None = None, **more: object) -> ServerHandle:
    tls = {"cert": pki.server_cert, "key": pki.server_key, "ca": pki.ca} if pki is not None else {}
    settings = Settings(address=f"unix://{path}", metrics_address="127.0.0.1:0", front=front, tls=tls, **more)
    provider = build_provider("sim", ProviderContext(inline_workers=True))
    return start_server(settings, provider=provider)


@pytest.fixture(params=["on", "off"])
def front(request: pytest.FixtureRequest, compiled_front: Path | None) -> str:
    if request.param == "on" and compiled_front is None:
        pytest.skip("the compiled front is not built here (Go missing); CI always builds it")
    return str(request.param)


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "mtls"])
def test_every_rpc_health_and_reflection_answer_over_the_socket(
    front: str, tls: bool, sock_dir: Path
) -> None:
    # over a socket CA verifies the server name `unix`, the address's host part
    pki = write_pki(sock_dir / "pki", server_names=("unix",)) if tls else None
    path = sock_dir / "grpc.sock"
    handle = socket_server(path, front, pki)
    try:
        assert handle.address == f"unix:{path}"
        with unix_channel(path, pki) as ch:
            assert serving(ch)
            for method in METHODS:
                call = ch.unary_unary(
                    f"/{SERVICE_NAME}/{method.name}",
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=lambda b: b,
                )
                request = getattr(pb, method.input_type.name)()
                try:
                    call(request, timeout=5)
                except grpc.RpcError as exc:
                    # answered by the server (an empty request may be refused), never unreachable
                    assert exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED), (
                        method.name,
                        exc.details(),
                    )
            listed = list(
                ch.stream_stream(
                    REFLECTION,
                    request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                    response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
                )(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
            )
            assert SERVICE_NAME in [s.name for s in listed[0].list_services_response.service]
        # the metrics and probes stay on their TCP port
        with urllib.request.urlopen(f"http://127.0.0.1:{handle.metrics_port}/healthz", timeout=5) as r:
            assert r.status == 200
    finally:
        handle.stop(grace=1)
    assert not path.exists()


def test_the_short_form_and_a_stricter_mode(sock_dir: Path) -> None:
    path = sock_dir / "grpc.sock"
    handle = socket_server(path, "off", socket_mode="0600")
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with unix_channel(path, form="unix:") as ch:
            assert len(stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 3
    finally:
        handle.stop(grace=1)


def test_a_stale_socket_is_replaced(sock_dir: Path) -> None:
    """A socket file nobody listens on any more (a server that was killed) does not block a start."""
    path = sock_dir / "grpc.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, with nobody behind it
    assert stat.S_ISSOCK(path.lstat().st_mode)
    handle = socket_server(path, "off")
    try:
        with unix_channel(path) as ch:
            assert serving(ch)
    finally:
        handle.stop(grace=1)


def test_a_front_that_died_is_restarted_on_the_socket(sock_dir: Path, compiled_front: Path | None) -> None:
    """kill -9 leaves the front's socket file behind; the new front replaces it and serves."""
    if compiled_front is None:
        pytest.skip("the compiled front is not built here (Go missing); CI always builds it")
    path = sock_dir / "grpc.sock"
    handle = socket_server(path, "on")
    try:
        assert handle.front is not None
        first = handle.front.process
        os.kill(first.pid, signal.SIGKILL)
        poll(lambda: handle.front is not None and handle.front.process is not first, 15, "a new front")
        with unix_channel(path) as ch:
            poll(lambda: serving(ch), 15, "the restarted front to serve on the socket")
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
    finally:
        handle.stop(grace=1)


@pytest.fixture
def served(front: str, sock_dir: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    path = sock_dir / "grpc.sock"
    proc = serve("--address", f"unix://{path}", "--metrics-address", "", "--front", front)
    try:
        with unix_channel(path) as ch:
            poll(lambda: proc.poll() is not None or serving(ch), 30, "the server to serve on the socket")
        assert proc.poll() is None, proc.communicate()
        yield proc, path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_serve_on_a_socket_refuses_a_second_server_and_removes_it_after_sigterm(
    served: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, path = served
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o660 and stat.S_ISSOCK(path.stat().st_mode)
    with unix_channel(path) as ch:
        assert len(stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 3
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--address",
            f"unix://{path}",
            "--metrics-address",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode != 0
    assert second.stderr.strip().splitlines() == [
        f"cloudprovider-grpc: cannot listen on unix:{path}: another server is listening on it"
    ]
    with unix_channel(path) as ch:  # the first one is unaffected
        assert len(stub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups) == 3
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert gone(proc.pid)
    assert not os.path.lexists(path)


def bad_path(kind: str, directory: Path) -> tuple[str, str]:
    """The address for one kind of bad path, and what its one line says."""
    if kind == "file":
        (directory / "file").write_text("not a socket")
        return f"unix://{directory}/file", "exists and is not a socket"
    if kind == "directory":
        (directory / "sub").mkdir()
        return f"unix://{directory}/sub", "is a directory, not a socket"
    if kind == "missing directory":
        return f"unix://{directory}/nope/grpc.sock", "does not exist"
    if kind == "too long":
        name = "s" * (MAX_SOCKET_PATH + 1 - len(f"{directory}/"))
        return f"unix://{directory}/{name}", f"over the {MAX_SOCKET_PATH} a unix socket allows"
    if kind == "colon":
        return f"unix://{directory}/a:b.sock", "must not contain ':'"
    if kind == "relative":
        return "unix:run/grpc.sock", "must be absolute"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["file", "directory", "missing directory", "too long", "colon", "relative"])
def test_a_bad_socket_path_is_one_line_and_exit_2(kind: str, sock_dir: Path) -> None:
    address, says = bad_path(kind, sock_dir)
    result = subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", "serve", "--address", address, "--metrics-address", ""],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.stderr, result.stderr
    if kind == "file":
        assert (sock_dir / "file").read_text() == "not a socket"  # left as it was


def test_a_read_only_directory_is_one_line_and_exit_2(sock_dir: Path) -> None:
    """A directory of mode 0555; as root, the server runs without the capability that lets root write
    anywhere (setpriv drops CAP_DAC_OVERRIDE), as a pod's non-root user would."""
    sock_dir.chmod(0o555)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        prefix = [setpriv, "--inh-caps=-dac_override", "--bounding-set=-dac_override"]
    command = [
        sys.executable,
        "-m",
        "cloudprovider_grpc",
        "serve",
        "--address",
        f"unix://{sock_dir}/grpc.sock",
    ]
    try:
        result = subprocess.run(
            [*prefix, *command, "--metrics-address", "", "--front", "off"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        sock_dir.chmod(0o700)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"cloudprovider-grpc: invalid configuration: address: the socket's directory {sock_dir} is not "
        "writable by this process"
    ], result.stderr


def listening_tcp_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes `pids` listen on, from /proc (IPv4 and IPv6)."""
    inodes: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except FileNotFoundError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


def test_the_pods_other_containers_reach_no_grpc_port(front: str, sock_dir: Path) -> None:
    """Containers of one pod share its network, not its volumes: a server on a socket listens on no
    TCP port but the metrics one (which answers no gRPC), so a process without the socket's volume
    has nothing to call."""
    metrics = free_port()
    path = sock_dir / "grpc.sock"
    proc = serve("--address", f"unix://{path}", "--metrics-address", f"127.0.0.1:{metrics}", "--front", front)
    try:
        with unix_channel(path) as ch:
            poll(lambda: proc.poll() is not None or serving(ch), 30, "the server to serve on the socket")
        assert proc.poll() is None, proc.communicate()
        pids = [proc.pid, *children(proc.pid)]
        assert len(pids) == (2 if front == "on" else 1), pids
        assert listening_tcp_ports(pids) == {metrics}
        with grpc.insecure_channel(f"127.0.0.1:{metrics}") as tcp:
            with pytest.raises(grpc.RpcError) as info:
                stub(tcp).NodeGroups(pb.NodeGroupsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"socket_mode": "0999"}, "is not an octal file mode"),
        ({"socket_mode": "0400"}, "leaves the server's own user unable to use its socket"),
        ({"leader_elect": {"enabled": True}}, "give a TCP address with --leader-elect"),
        ({"address": "unix://host/grpc.sock"}, "names a host ('host')"),
    ],
)
def test_settings_a_socket_cannot_take(overrides: dict[str, object], says: str) -> None:
    """A mode the server could not use its socket with; leader election, whose hand-over needs the
    other replicas' TCP ports; an address with a host part, which grpc-go's unix resolver refuses."""
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"address": "unix:///tmp/grpc.sock", **overrides})
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_a_start_that_fails_later_leaves_no_socket(front: str, sock_dir: Path) -> None:
    """The metrics port taken: the server does not start, and the socket it had bound is gone."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    path = sock_dir / "grpc.sock"
    settings = Settings(
        address=f"unix://{path}", metrics_address=f"127.0.0.1:{taken.getsockname()[1]}", front=front
    )
    try:
        with pytest.raises(ServerStartError, match="cannot listen on metrics address"):
            start_server(settings, provider=build_provider("sim", ProviderContext(inline_workers=True)))
    finally:
        taken.close()
    assert not os.path.lexists(path)
