"""Build (or find cached) everything the real-CA and conformance suites run, first and once, and
print how long each step took: on a warm machine every step is a cache hit."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.realca import builds
from tests.realca.conftest import require_tools
from tests.support import gotools

pytestmark = [pytest.mark.realca, pytest.mark.timeout(3600)]  # cold, on a busy 2-core machine

#: the CA binaries the real-CA layout runs (see test_realca.py)
CA_VERSIONS = ("1.36.1", "master", "1.34.1")


def test_everything_builds_and_runs() -> None:
    require_tools()
    timings: dict[str, float] = {}

    def step(name: str, build):
        start = time.monotonic()
        result = build()
        timings[name] = time.monotonic() - start
        return result

    etcd = step("etcd (Debian etcd-server)", builds.etcd)
    plane = step(f"control plane (k8s.io/kubernetes {builds.kubernetes_version()})", builds.control_plane)
    cas = {v: step(f"cluster-autoscaler {v}", lambda v=v: builds.ca_binary(v)) for v in CA_VERSIONS}
    for line in (f"{name}: {secs:.0f} s" for name, secs in timings.items()):
        print(line)

    out = subprocess.run([str(etcd), "--version"], capture_output=True, text=True, check=True).stdout
    assert "etcd Version: 3." in out
    for name in builds.CONTROL_PLANE:
        out = subprocess.run(
            [str(plane / name), "--version"], capture_output=True, text=True, check=True
        ).stdout
        assert builds.kubernetes_version() in out, out
    for version, binary in cas.items():
        # CA has no --version flag; Go's build info names the module and the build tags
        info = subprocess.run(
            ["go", "version", "-m", str(binary)],
            env=gotools.go_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "path\tk8s.io/autoscaler/cluster-autoscaler" in info, (version, info[:500])
        assert "build\t-tags=externalgrpc" in info, (version, info[:500])
