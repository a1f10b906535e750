"""The host tools the realnode tier runs (podman, runc, containerd, mmdebstrap, the CNI plugins),
installed from Debian's packages when missing, and the tier's cache outside the clone.

As root on a Debian host (CI's runners, a developer's VM) a missing tool is installed with
`apt-get install -y`; anywhere else the tier skips with the reason, or fails under CI=true
(`tests.deploy_support.tools.unavailable`): CI must never pass without having run it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from cloudprovider_grpc.front.gotoolchain import file_lock, user_cache
from tests.deploy_support.tools import unavailable
from tests.preparation.gate import may_build

#: executable (or file) -> the Debian package that provides it
PACKAGES = {
    "podman": "podman",
    "runc": "runc",
    "containerd": "containerd",
    "mmdebstrap": "mmdebstrap",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "iptables": "iptables",
}


def cache() -> Path:
    """The tier's cache (base images' root filesystems, podman's storage), outside any clone."""
    path = user_cache() / "realnode"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _present(name: str) -> bool:
    return Path(name).exists() if name.startswith("/") else shutil.which(name) is not None


def missing_packages() -> list[str]:
    return sorted({package for name, package in PACKAGES.items() if not _present(name)})


def install() -> str | None:
    """Every missing package installed (the preparation step `host-packages`); None when all are
    there, else why they cannot be."""
    return _install()


@functools.cache
def _install() -> str | None:
    """Install every missing package; None when all are there, else why they cannot be."""
    missing = missing_packages()
    if not missing:
        return None
    may_build("host-packages")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"missing {', '.join(missing)} (installed with apt-get only when the tests run as root)"
    with file_lock(cache() / "locks", "apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0:  # the package lists may never have been fetched on a fresh machine
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600, check=False)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0:
            return f"apt-get install {' '.join(missing)} failed: {proc.stderr.strip()[-500:]}"
    still = [name for name in PACKAGES if not _present(name)]
    return f"still missing after apt-get: {still}" if still else None


def require_tools() -> None:
    """Every host tool of the tier, installed if need be (skip, or fail under CI, when impossible)."""
    reason = _install()
    if reason is not None:
        unavailable("the realnode tier's host tools", reason)
