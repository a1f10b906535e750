"""The simulator's documented examples print what the documentation says they print.

Every shell block of the simulator pages marked `<!-- runs: tests/simulator/test_documented_runs.py -->`
is run from a directory holding the repository's examples (as a user in a clone would), and its
output must equal the `text` block that follows it, line by line: the figures in the docs are the
figures the command prints. A block starting with a line `…` shows the end of a long output.
The examples in `simulate --help` are checked too: the runnable ones run (the acceptance test of
the Vultr one, and of the same on every backend, is test_one_clock.py), and the ones that need
something this machine lacks say what.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cloudprovider_grpc.simulator.cli_args import EPILOG

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs" / "simulator.md", ROOT / "docs" / "simulate-your-cluster.md"]
MARKER = "<!-- runs: tests/simulator/test_documented_runs.py -->"
#: examples of `simulate --help` that cannot run here, and why
NOT_RUNNABLE = {
    "--from-cluster": "needs a live cluster and a running server",
    "--executor dask://": "needs a Dask scheduler",
}


def documented_runs() -> list[tuple[str, str, str]]:
    """(where, shell block, the text block after it) for every marked block."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        pattern = re.escape(MARKER) + r"\n```sh\n(.*?)\n```\n\n```text\n(.*?)\n```"
        for m in re.finditer(pattern, text, re.S):
            line = text[: m.start()].count("\n") + 1
            found.append((f"{page.name}:{line}", m.group(1), m.group(2)))
    return found


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    assert argv[0] == "cloudprovider-grpc", command
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    return subprocess.run(
        [sys.executable, "-m", "cloudprovider_grpc", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


@pytest.mark.unit
def test_every_marked_block_has_its_printed_output_beside_it() -> None:
    marked = sum(p.read_text(encoding="utf-8").count(MARKER) for p in PAGES)
    assert marked == len(documented_runs()) >= 2


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(("where", "commands", "printed"), documented_runs(), ids=lambda v: str(v)[:40])
def test_the_documented_run_prints_what_the_docs_show(where, commands, printed, tmp_path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    out = []
    for command in commands.splitlines():
        done = _run(command, tmp_path)
        assert done.returncode == 0, (where, command, done.stderr[-2000:])
        out.append(done.stdout)
    got, shown = "".join(out).rstrip("\n").splitlines(), printed.splitlines()
    if shown[0] == "…":  # the docs show the end of a long output: it must be the output's end
        shown = shown[1:]
        got = got[-len(shown) :]
    assert got == shown, where


def help_examples() -> list[str]:
    text = EPILOG.split("examples:", 1)[1].replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


@pytest.mark.unit
def test_the_help_names_only_files_that_exist_or_says_why_not() -> None:
    for example in help_examples():
        if any(flag in example for flag in NOT_RUNNABLE):
            continue
        for arg in shlex.split(example):
            if arg.endswith((".yaml", ".json")):
                assert (ROOT / arg).is_file(), (
                    f"`simulate --help` example names {arg}, which is not in a clone"
                )


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("example", help_examples())
def test_the_help_examples_run(example, tmp_path) -> None:
    why = next((why for flag, why in NOT_RUNNABLE.items() if flag in example), None)
    if why is not None:
        pytest.skip(f"`{example}`: {why}")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = _run(f"cloudprovider-grpc {example} --quiet", tmp_path)
    assert done.returncode == 0, (example, done.stderr[-2000:])
    if "--variant" in example or "--compare" in example:
        assert "wrote out/compare/compare.html" in done.stdout.splitlines()
        assert done.stdout.splitlines()[-1].split()[0] in example
        return
    summary = done.stdout.rstrip("\n").splitlines()[-1]
    assert re.match(r"^\S+: \d+ loops, \d+ node\(s\) added, \d+ removed, max \d+ pending pods", summary)
