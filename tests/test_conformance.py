"""Conformance through the project's CA-faithful client, over real sockets, at every wire generation.

The pytest entry point of `tests/conformance/run.sh` (docs/architecture.md "Conformance"): for every
backend of `tests/support/backends.py` (today sim, sim-pools, cherry, vultr, exoscale, alicloud and spc;
a new backend joins by being registered there) and every client generation (1.37+, 1.35-1.36, 1.34.2,
1.33-1.34.1, 1.29-1.32, 1.25-1.28), the Go client in `tests/conformance` drives three servers on
loopback with mutual TLS as CA's externalgrpc client does: each generation with its own fields sent and
read, its own error mapping (UNIMPLEMENTED passed up raw before 1.29), deadline (a fixed 5 s before
1.29, `grpc_timeout` after) and cloud-config reader. A seventh run per backend, `future`, is the newest
generation with fields no release declares added to every request. The README's grpcurl examples run
once.

`test_options_getters_*` show what an UNIMPLEMENTED answer to NodeGroupGetOptions does to CA's config
processor at each generation, against a stand-in server that answers so, and that the empty answer
the project's server gives yields CA's defaults everywhere.

The mutation tests prove the client reads the wire as each CA release does: a throwaway copy of the
package, its proto renumbering one field and its Python code regenerated, must fail exactly the
generations that read that field.

Outside CI the Go-built tests skip when Go is missing; in CI (CI=true) that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.realnode import official_chart
from tests.support import conformance, gotools
from tests.support.backends import BACKENDS, BackendUnderTest
from tests.support.certs import write_pki
from tests.support.front import serve
from tests.support.ports import free_port
from tests.support.probes import start_server
from tests.support.waits import poll

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "conformance" / "run.sh"
SCHEMAS = ROOT / "tests" / "conformance" / "caclient" / "schemas"
GOLDEN = ROOT.parent / "shared" / "golden" / "externalgrpc"

#: the run that adds fields no release declares to every request of the newest generation
FUTURE = "future"
NEWEST = next(iter(conformance.GENERATIONS))

#: every RPC of the service and the CA function that issues it; each must appear in a passed check,
#: so no RPC goes unexercised by the client.
CA_CALLERS = {
    "NodeGroups": "CloudProvider.NodeGroups",
    "NodeGroupForNode": "CloudProvider.NodeGroupForNode",
    "PricingNodePrice": "PricingModel.NodePrice",
    "PricingPodPrice": "PricingModel.PodPrice",
    "GPULabel": "CloudProvider.GPULabel",
    "GetAvailableGPUTypes": "CloudProvider.GetAvailableGPUTypes",
    "Cleanup": "CloudProvider.Cleanup",
    "Refresh": "CloudProvider.Refresh",
    "NodeGroupTargetSize": "NodeGroup.TargetSize",
    "NodeGroupIncreaseSize": "NodeGroup.IncreaseSize",
    "NodeGroupDeleteNodes": "NodeGroup.DeleteNodes",
    "NodeGroupDecreaseTargetSize": "NodeGroup.DecreaseTargetSize",
    "NodeGroupNodes": "NodeGroup.Nodes",
    "NodeGroupTemplateNodeInfo": "NodeGroup.TemplateNodeInfo",
    "NodeGroupGetOptions": "NodeGroup.GetOptions",
}


def _client() -> Path:
    if gotools.go_binary() is None:
        if gotools.in_ci():
            pytest.fail("conformance cannot run in CI: no Go toolchain")
        pytest.skip("no Go toolchain; install Go >= 1.26 to build the conformance client")
    return conformance.client()


@pytest.mark.unit
@pytest.mark.parametrize("release", sorted(set(conformance.GENERATIONS.values())))
def test_client_schemas_are_the_golden_ones(release: str) -> None:
    """The client's embedded wire schemas are byte-identical to the golden protoc dumps."""
    golden = GOLDEN / f"{release}.json"
    if not golden.is_file():
        pytest.fail(f"golden schema {golden} is missing")
    assert (SCHEMAS / f"{release}.json").read_bytes() == golden.read_bytes()


@pytest.mark.slow
@pytest.mark.integration
def test_client_knows_every_generation() -> None:
    assert conformance.generations(_client()) == conformance.GENERATIONS


@pytest.mark.slow
@pytest.mark.integration
def test_client_sources_are_gofmt_and_go_vet_clean(tmp_path: Path) -> None:
    go = gotools.go_binary()
    if go is None:
        _client()  # fails in CI, skips elsewhere
        return
    tree = conformance.prepare(tmp_path / "client")
    gofmt = subprocess.run(
        [str(Path(go).with_name("gofmt")), "-l", "."], cwd=tree, capture_output=True, text=True, check=False
    )
    assert gofmt.returncode == 0 and not gofmt.stdout.strip(), (
        f"not gofmt-clean:\n{gofmt.stdout}{gofmt.stderr}"
    )
    vet = subprocess.run(
        [go, "vet", "./..."], cwd=tree, env=gotools.go_env(), capture_output=True, text=True, check=False
    )
    assert vet.returncode == 0, vet.stdout + vet.stderr


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1200)  # a cold build of the client (k8s.io/api, grpc-go) takes minutes on 2 cores
@pytest.mark.parametrize("mode", [*conformance.GENERATIONS, FUTURE])
@pytest.mark.parametrize("be", BACKENDS, ids=lambda b: b.name)
def test_conformance(be: BackendUnderTest, mode: str, tmp_path: Path) -> None:
    client = _client()
    args = list(be.serve_args)
    generation = NEWEST if mode == FUTURE else mode
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "CA_GENERATION": generation,
        **({"CA_FUTURE": "1"} if mode == FUTURE else {}),
        "CONFORMANCE_BIN": str(client),
        "GRPCURL_BIN": str(conformance.grpcurl()),
        # the README's grpcurl lines once, not per generation and backend
        "GRPCURL_EXAMPLES": "1" if (be.name, mode) == ("sim", NEWEST) else "0",
    }
    if be.conformance_config:
        config = tmp_path / "conformance.yaml"
        config.write_text(be.conformance_config)
        args += ["--config", str(config)]
        env["CONFORMANCE_PROFILE"] = "generic"
    else:
        env["CONFORMANCE_PROFILE"] = "sim" if be.name == "sim" else "generic"
    proc = subprocess.run(
        ["bash", str(RUN), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    out = proc.stdout
    print(out)
    print(proc.stderr, file=sys.stderr)
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not failed, (
        f"{len(failed)} conformance check(s) failed; output:\n{out[-8000:]}\n{proc.stderr[-3000:]}"
    )
    assert f"client generation {generation} (wire schema {conformance.GENERATIONS[generation]})" in out
    assert ("future mode: every request carries fields no release declares" in out) == (mode == FUTURE)
    assert "conformance: " in out and ", 0 failed" in out, out[-2000:]
    passed = [line for line in out.splitlines() if re.match(r"ok\s+\[", line) and "[grpcurl]" not in line]
    missing = [rpc for rpc, fn in CA_CALLERS.items() if not any(fn in line for line in passed)]
    assert not missing, f"RPCs no passed check exercised: {missing}"
    assert all(f"[{generation}]" in line for line in passed), "a check ran under another generation"
    if env["GRPCURL_EXAMPLES"] == "1":
        grpcurl = re.search(r"^grpcurl examples: (\d+) passed, (\d+) failed$", out, re.M)
        assert grpcurl and int(grpcurl[1]) >= 4 and grpcurl[2] == "0", out[-2000:]


# ---------------------------------------------------------------- mutations

#: field -> (the line that numbers it, the generations that must fail once it is renumbered). A line
#: of the proto is renumbered there and the Python code regenerated; options field 11, which our
#: schema does not declare (it is read on the wire, see grpcapi/wire.py), is renumbered in wire.py.
#: pod_bytes: 1.34.2 sends the pod in both fields, so a server that misses pod_bytes still finds the
#: legacy `pod` and answers it correctly; only 1.35 and later, which send pod_bytes alone, are misread.
MUTATIONS = {
    "nodeBytes": ("bytes nodeBytes = 2;", {"1.37+", "1.35-1.36", "1.34.2"}),
    "nodeInfo": (
        "bytes nodeInfo = 1 [deprecated = true];",
        {"1.34.2", "1.33-1.34.1", "1.29-1.32", "1.25-1.28"},
    ),
    "pod_bytes": ("bytes pod_bytes = 4;", {"1.37+", "1.35-1.36"}),
    "maxNodeStartupDuration": ("STARTUP_FIELD = 11", {"1.37+"}),
}
#: a number no generation uses in any message
UNUSED_NUMBER = 15
WIRE = Path("cloudprovider_grpc") / "grpcapi" / "wire.py"


def _mutated_package(tmp_path: Path, declaration: str) -> Path:
    """A copy of the package that renumbers one field: in the proto (its Python code regenerated),
    or, for a field read on the wire, in wire.py."""
    copy = tmp_path / "mutant"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "cloudprovider_grpc", copy / "cloudprovider_grpc", ignore=ignore)
    shutil.copytree(ROOT / "proto", copy / "proto")
    proto = copy / "proto" / conformance.PROTO
    target = proto if declaration.endswith(";") else copy / WIRE
    text = target.read_text()
    assert text.count(declaration) == 1, f"{declaration!r} not found once in {target.name}"
    renumbered = re.sub(r"= \d+", f"= {UNUSED_NUMBER}", declaration, count=1)
    in_use = re.search(rf"= {UNUSED_NUMBER}\b", proto.read_text())
    assert not in_use, f"field number {UNUSED_NUMBER} is in use"
    target.write_text(text.replace(declaration, renumbered))
    if target != proto:
        return copy
    regenerate = [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(copy), str(copy / "proto")]
    proc = subprocess.run(regenerate, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"regenerating the mutated proto failed:\n{proc.stdout}{proc.stderr}"
    return copy


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_renumbered_field_fails_the_generations_that_read_it(name: str, tmp_path: Path) -> None:
    client = _client()
    declaration, must_fail = MUTATIONS[name]
    copy = _mutated_package(tmp_path, declaration)
    sim = next(b for b in BACKENDS if b.name == "sim")
    env = {"PYTHONPATH": str(copy)}
    extra = ["--front", "off", "--log-level", "warning"]
    # cwd too: `python -m` puts the working directory first on sys.path
    server = start_server(sim, tmp_path / "server", extra=extra, env=env, cwd=copy)
    try:
        probe = "import cloudprovider_grpc.protos.externalgrpc_pb2 as m; print(m.__file__)"
        origin = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=copy,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert origin.startswith(str(copy)), f"the server would import the unmutated package ({origin})"
        cloud_config = tmp_path / "cloud-config.yaml"
        cloud_config.write_text(f"address: localhost:{server.port}\ngrpc_timeout: 5s\n")
        failed: set[str] = set()
        for generation in conformance.GENERATIONS:
            proc = subprocess.run(
                [str(client), "run", "-generation", generation, "-cloud-config", str(cloud_config),
                 "-metrics", f"http://127.0.0.1:{server.metrics_port}/metrics", "-profile", "sim",
                 "-only", "templates,options,pricing"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            print(proc.stdout)
            assert "conformance: " in proc.stdout, proc.stdout + proc.stderr
            if proc.returncode != 0:
                failed.add(generation)
        assert failed == must_fail, f"renumbering {name}: failed {sorted(failed)}, want {sorted(must_fail)}"
    finally:
        server.close()


# ---------------------------------------------------------------- options getters

#: the generation that passes UNIMPLEMENTED up raw (CA 1.25.0-1.28.7)
RAW_ERRORS = "1.25-1.28"


def _getters(client: Path, generation: str) -> dict[str, dict[str, str]]:
    """answer ("UNIMPLEMENTED" or "empty") -> getter -> outcome, from `conformance getters`."""
    proc = subprocess.run(
        [str(client), "getters", "-generation", generation],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        tag, gen, answer, getter, outcome = line.split("\t")
        assert (tag, gen) == ("getters", generation), line
        out.setdefault(answer, {})[getter] = outcome
    return out


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("generation", [RAW_ERRORS])
def test_options_getters_fail_on_unimplemented_before_1_29(generation: str) -> None:
    """CA 1.25-1.28 pass UNIMPLEMENTED up raw, so every getter of the config processor fails."""
    outcomes = _getters(_client(), generation)
    assert set(outcomes) == {"UNIMPLEMENTED", "empty"}
    assert len(outcomes["UNIMPLEMENTED"]) >= 4
    assert all(o.startswith("error: Unimplemented") for o in outcomes["UNIMPLEMENTED"].values()), outcomes
    assert all(o == "default" for o in outcomes["empty"].values()), outcomes


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("generation", [g for g in conformance.GENERATIONS if g != RAW_ERRORS])
def test_options_getters_fall_back_to_defaults_from_1_29(generation: str) -> None:
    """From 1.29 UNIMPLEMENTED is ErrNotImplemented and, like the empty answer, yields CA's defaults."""
    outcomes = _getters(_client(), generation)
    assert set(outcomes) == {"UNIMPLEMENTED", "empty"}
    for answer in ("UNIMPLEMENTED", "empty"):
        assert len(outcomes[answer]) >= 6
        assert all(o == "default" for o in outcomes[answer].values()), (answer, outcomes)


# ---------------------------------------------------------------- over a unix socket


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "mtls"])
def test_every_generation_dials_a_unix_socket_as_ca_does(tls: bool) -> None:
    """The sidecar's address, `unix:///PATH` in CA's cloud-config, dialled at every generation as
    CA's constructor does: the host part `unix` (net.SplitHostPort) is the TLS server name, the whole
    address goes to grpc.Dial, whose unix resolver connects to the socket."""
    client = _client()
    directory = Path(tempfile.mkdtemp(prefix="cpg-conf-", dir="/tmp"))  # a socket path's 107 bytes
    try:
        socket_path = directory / "grpc.sock"
        metrics = free_port()
        args = ["--address", f"unix://{socket_path}", "--metrics-address", f"127.0.0.1:{metrics}"]
        config = f"address: unix://{socket_path}\ngrpc_timeout: 5s\n"
        if tls:
            pki = write_pki(directory / "pki", server_names=("unix",))
            args += [
                "--tls-cert",
                str(pki.server_cert),
                "--tls-key",
                str(pki.server_key),
                "--tls-ca",
                str(pki.ca),
            ]
            config += f"cert: {pki.client_cert}\nkey: {pki.client_key}\ncacert: {pki.ca}\n"
        cloud_config = directory / "cloud-config.yaml"
        cloud_config.write_text(config)
        server = serve(*args)
        try:
            poll(lambda: server.poll() is not None or _healthy(metrics), 60, "the server on the socket")
            assert server.poll() is None, server.communicate()
            for generation in conformance.GENERATIONS:
                proc = subprocess.run(
                    [str(client), "run", "-generation", generation, "-cloud-config", str(cloud_config),
                     "-metrics", f"http://127.0.0.1:{metrics}/metrics", "-profile", "sim",
                     "-only", "mtls,groups,templates,pricing"],
                    capture_output=True, text=True, timeout=120, check=False,
                )  # fmt: skip
                assert proc.returncode == 0, f"{generation}:\n{proc.stdout}{proc.stderr}"
                if tls:
                    assert "mTLS handshake, ServerName = host of address" in proc.stdout, proc.stdout
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=30)
        assert not socket_path.exists()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.mark.integration
def test_the_standin_runs_cas_loops_over_the_socket() -> None:
    """The realnode tier's cluster-autoscaler stand-in dials through the same client: given the
    sidecar's cloud-config (`address: unix:///PATH`), its loops are answered over the socket."""
    if gotools.go_binary() is None:
        if gotools.in_ci():
            pytest.fail("the stand-in cannot be built in CI: no Go toolchain")
        pytest.skip("no Go toolchain to build the cluster-autoscaler stand-in")
    binary = official_chart.standin_binary()
    directory = Path(tempfile.mkdtemp(prefix="cpg-standin-", dir="/tmp"))  # a socket path's 107 bytes
    try:
        socket_path = directory / "grpc.sock"
        metrics = free_port()
        server = serve("--address", f"unix://{socket_path}", "--metrics-address", f"127.0.0.1:{metrics}")
        config = directory / "cloud-config"
        config.write_text(f"address: unix://{socket_path}\ngrpc_timeout: 2s\n")
        health = f"127.0.0.1:{free_port()}"
        args = ["--cloud-provider=externalgrpc", f"--cloud-config={config}", "--scan-interval=200ms"]
        try:
            poll(lambda: server.poll() is not None or _healthy(metrics), 60, "the server on the socket")
            assert server.poll() is None, server.communicate()
        except BaseException:
            server.kill()
            server.communicate()
            raise
        standin = subprocess.Popen(
            [str(binary), *args, f"--address={health}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            report = poll(
                lambda: (got := official_chart.standin_report(health)) and got["loops"] >= 3 and got,
                30,
                "three loops of the stand-in",
            )
            assert report["last_ok"] and not report["failed"], report
            assert report["calls"]["NodeGroups"] >= 3 and report["calls"]["Refresh"] >= 3, report
        finally:
            standin.terminate()
            standin.communicate(timeout=10)
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=30)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
