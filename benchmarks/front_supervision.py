"""The compiled front as a supervised part, measured against real `cloudprovider-grpc serve` processes.

    .venv/bin/python benchmarks/front_supervision.py [--rounds 5] [--ids-mb 1 4] [--id-requests 200]

Prints, for the sim backend behind the front:
- kill -9 of the front -> the port answers again: seconds (median and worst of `rounds`);
- the front's connection to Python broken (Python's socket removed and Python stopped, SIGSTOP) ->
  the gRPC health check answers NOT_SERVING: seconds; in-process, since the socket lives in Python's
  private directory;
- TLS rotation with Python paused (SIGSTOP) for 5 s: whether the first handshake after the files
  changed shows the new certificate, and how long it took;
- the front's RSS after `id-requests` NodeGroupTargetSize calls with distinct ids of 1 MB and 4 MB
  each (NOT_FOUND answers, which the front would cache), against its stated bound
  (front/process.py FRONT_RSS_BOUND).
Asserts nothing (tests hold the behaviour; this prints the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from cloudprovider_grpc.front.process import FRONT_RSS_BOUND  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb  # noqa: E402
from cloudprovider_grpc.protos import externalgrpc_pb2_grpc as pb_grpc  # noqa: E402
from tests.support.certs import write_pki  # noqa: E402
from tests.support.front import children, ensure_front  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.servers import sim_server  # noqa: E402


def serve(port: int, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "cloudprovider_grpc", "serve", "--address", f"127.0.0.1:{port}"]
    return subprocess.Popen(
        [*command, "--metrics-address", "", "--front", "on", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def answers(ch: grpc.Channel) -> bool:
    try:
        pb_grpc.CloudProviderStub(ch).NodeGroups(pb.NodeGroupsRequest(), timeout=1)
        return True
    except grpc.RpcError:
        return False


def answers_fresh(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return answers(ch)


def wait(check, timeout: float = 30.0) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise SystemExit("timed out")
        time.sleep(0.002)
    return time.monotonic() - start


def restart_times(rounds: int) -> list[float]:
    port = free_port()
    proc = serve(port)
    times = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            wait(lambda: answers(ch))
            for _ in range(rounds):
                front = children(proc.pid)[0]
                os.kill(front, signal.SIGKILL)
                start = time.monotonic()
                # the port answers again only through a new front (the old one is gone); each try on
                # a new channel, so that no client-side reconnect backoff is measured
                while not (front not in children(proc.pid) and answers_fresh(port)):
                    time.sleep(0.002)
                times.append(time.monotonic() - start)
                time.sleep(15)  # stay inside the restart budget (MAX_RESTARTS per RESTART_WINDOW)
    finally:
        proc.kill()
        proc.wait()
    return times


def not_serving_time() -> float:
    with sim_server(front="on") as handle, grpc.insecure_channel(f"127.0.0.1:{handle.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        assert handle.front is not None
        (handle.front.directory / "grpc.sock").unlink()
        start = time.monotonic()
        handle.server.stop(0)

        def down() -> bool:
            status = health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
            return status == health_pb2.HealthCheckResponse.NOT_SERVING

        wait(down)
        return time.monotonic() - start


def tls_rotation() -> tuple[bool, float]:
    work = Path(tempfile.mkdtemp(prefix="cpgb", dir="/tmp"))
    try:
        live, rotated = write_pki(work / "live"), write_pki(work / "rotated")
        port = free_port()
        tls = [
            "--tls-cert",
            str(live.server_cert),
            "--tls-key",
            str(live.server_key),
            "--tls-ca",
            str(live.ca),
        ]
        proc = serve(port, *tls)

        def handshake(pki) -> bool:  # type: ignore[no-untyped-def]
            creds = grpc.ssl_channel_credentials(
                pki.read("ca"), pki.read("client_key"), pki.read("client_cert")
            )
            with grpc.secure_channel(f"localhost:{port}", creds) as ch:
                try:
                    grpc.channel_ready_future(ch).result(timeout=3)
                    return True
                except grpc.FutureTimeoutError:
                    return False

        try:
            wait(lambda: handshake(live))
            os.kill(proc.pid, signal.SIGSTOP)
            for name in ("server.crt", "server.key", "ca.crt"):
                shutil.copy(rotated.dir / name, live.dir / f".{name}")
                os.replace(live.dir / f".{name}", live.dir / name)
            start = time.monotonic()
            ok = handshake(rotated)
            took = time.monotonic() - start
            time.sleep(max(0.0, 5 - took))  # Python stays paused 5 s in all
            os.kill(proc.pid, signal.SIGCONT)
            return ok, took
        finally:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def rss_with_ids(megabytes: int, requests: int) -> tuple[int, int]:
    """(front RSS before, peak front RSS sampled after each call) for distinct ids of `megabytes`."""
    port = free_port()
    proc = serve(port)
    try:
        options = [("grpc.max_send_message_length", 8 << 20)]
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
            wait(lambda: answers(ch))
            front = children(proc.pid)[0]
            before = rss(front)
            call = pb_grpc.CloudProviderStub(ch).NodeGroupTargetSize
            peak = before
            base = "x" * (megabytes * 1_000_000 - 8)
            for i in range(requests):
                with contextlib.suppress(grpc.RpcError):  # NOT_FOUND: no such group
                    call(pb.NodeGroupTargetSizeRequest(id=f"{base}{i:08d}"), timeout=10)
                peak = max(peak, rss(front))
            return before, peak
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ids-mb", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--id-requests", type=int, default=200)
    args = parser.parse_args()
    if ensure_front() is None:
        raise SystemExit("the compiled front cannot be built here")
    times = restart_times(args.rounds)
    print(
        f"kill -9 of the front -> serving again: median {statistics.median(times) * 1000:.0f} ms, "
        f"worst {max(times) * 1000:.0f} ms over {len(times)} rounds"
    )
    print(f"broken socket -> health NOT_SERVING: {not_serving_time() * 1000:.0f} ms")
    ok, took = tls_rotation()
    print(
        f"TLS rotation with Python paused 5 s: new certificate on the next handshake: {ok} "
        f"({took * 1000:.0f} ms)"
    )
    for mb in args.ids_mb:
        before, peak = rss_with_ids(mb, args.id_requests)
        print(
            f"front RSS, {args.id_requests} distinct {mb} MB ids: {before / 2**20:.0f} MiB at start, "
            f"peak {peak / 2**20:.0f} MiB (bound {FRONT_RSS_BOUND / 2**20:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
