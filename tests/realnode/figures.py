"""The tier's figures (image size, build and install times, the upgrade's call counts), printed
where they are measured and kept in one file per run, which the run's terminal summary prints:
under xdist a worker's own output never reaches the terminal, so `-s` alone would not show them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: the environment variable naming the run's figures file (set by the controller, read by workers)
ENV = "CPG_REALNODE_FIGURES"


def start() -> None:
    """Name a fresh figures file for this run (once, in the controlling process)."""
    if ENV not in os.environ:
        handle, path = tempfile.mkstemp(prefix="realnode-figures-", suffix=".txt")
        os.close(handle)
        os.environ[ENV] = path


def note(text: str) -> None:
    """Print `text` and keep it for the summary."""
    print(text)
    path = os.environ.get(ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(text.strip("\n") + "\n")


def collected() -> tuple[Path, list[str]] | None:
    """The run's figures file and its lines, when anything was noted."""
    path = os.environ.get(ENV)
    if not path or not Path(path).is_file():
        return None
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return (Path(path), lines) if lines else None


def discard_if_empty() -> None:
    """Remove the run's figures file when nothing was noted (a run of other tiers' tests)."""
    path = os.environ.get(ENV)
    if path and Path(path).is_file() and Path(path).stat().st_size == 0:
        Path(path).unlink()
