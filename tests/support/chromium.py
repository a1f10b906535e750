"""Headless Chromium (Debian's `chromium`) for tests that open a page: the installed one, else
the Debian packages unpacked once into the user cache outside the clone (`apt-get download` and
`dpkg -x`, no root needed), like the Go tools in gotools.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from cloudprovider_grpc.front.gotoolchain import file_lock, user_cache
from tests.preparation.gate import may_build

ROOT = user_cache() / "chromium"


def unpacked() -> Path:
    return ROOT / "usr" / "lib" / "chromium" / "chromium"


def _install() -> None:
    """Download chromium and every dependency this machine lacks, and unpack them under ROOT."""
    may_build("chromium")
    debs = user_cache() / "chromium-debs"
    debs.mkdir(parents=True, exist_ok=True)
    deps = subprocess.run(
        [
            "apt-cache",
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
            "chromium",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    names = sorted({line.strip() for line in deps.splitlines() if line[:1].isalnum()})
    missing = [n for n in names if subprocess.run(["dpkg", "-s", n], capture_output=True).returncode != 0]
    subprocess.run(["apt-get", "download", *missing], cwd=debs, capture_output=True, check=True, timeout=900)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(ROOT)], check=True, timeout=120)


def chromium() -> tuple[list[str], dict[str, str]] | None:
    """The command prefix and environment to run headless Chromium, or None when there is none."""
    base = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"]
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return [found, *base], dict(os.environ)
    if not unpacked().exists() and shutil.which("apt-get") and shutil.which("dpkg"):
        with file_lock(user_cache(), "chromium"):
            if not unpacked().exists():
                try:
                    _install()
                except (subprocess.SubprocessError, OSError):
                    return None
    if not unpacked().exists():
        return None
    libs = sorted({str(p.parent) for p in ROOT.rglob("*.so*")})
    env = dict(os.environ, LD_LIBRARY_PATH=":".join([*libs, os.environ.get("LD_LIBRARY_PATH", "")]))
    return [str(unpacked()), *base], env
