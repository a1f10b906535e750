"""Bytecode for the suite's own Python processes, even where the environment turns it off.

Many CI images and shells set PYTHONDONTWRITEBYTECODE=1. The suite then pays for it hundreds of
times: every server, CLI run and worker it starts compiles the package (and pytest rewrites every
test module) from source again. Measured on 2 cores: a `serve` started in 0.43-0.55 s of CPU
without bytecode and 0.35-0.37 s with it; collecting the suite took 6.5 s of CPU against 2.4 s, in
each of the four workers. So for the length of one run, the processes the suite starts write and
share bytecode in a directory of their own (PYTHONPYCACHEPREFIX), outside the clone, removed when
the run ends: nothing is left behind, as the setting intends.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

#: set in the environment of the processes of one run: the directory this run's bytecode is in
ENV = "PYTHONPYCACHEPREFIX"


def share_for_this_run() -> str | None:
    """In the process that controls the run: if bytecode is off, turn it on for this process and
    every one it starts, into a fresh directory; returns that directory (for `discard`), or None
    when the environment already allows bytecode or names its own prefix."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get(ENV):
        return None
    prefix = tempfile.mkdtemp(prefix="cpg-pycache-")
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ[ENV] = prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = prefix
    return prefix


def discard(prefix: str | None) -> None:
    if prefix is not None:
        shutil.rmtree(prefix, ignore_errors=True)
