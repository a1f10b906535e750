"""The pages' sessions with a running server, replayed: `serve` prints the line a page shows after
`<!-- printed by: COMMAND -->`, and every `$ command` of a console block marked
`<!-- runs: tests/test_docs_session.py -->` prints the output shown under it, against a real
`cloudprovider-grpc serve` started as the page starts it (on free ports instead of 8086/8087, which
are put back before comparing)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.waits import poll
from tests.test_docs import ALL_BLOCKS, Block

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = [b for b in ALL_BLOCKS if b.marker == "<!-- runs: tests/test_docs_session.py -->"]
PRINTED = [b for b in ALL_BLOCKS if b.marker.startswith("<!-- printed by: ")]


@dataclass
class Served:
    grpc_port: int
    metrics_port: int
    first_line: str

    def canonical(self, text: str) -> str:
        """The text as it reads on the default ports."""
        return text.replace(f":{self.grpc_port}", ":8086").replace(f":{self.metrics_port}", ":8087")


@contextmanager
def serving(command: str) -> Iterator[Served]:
    """`command` (a page's `cloudprovider-grpc serve ...`) on free loopback ports; the compiled front
    off, as on a fresh install where it was never built."""
    grpc_port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDPROVIDER_GRPC_")}
    env.update(
        CLOUDPROVIDER_GRPC_ADDRESS=f"127.0.0.1:{grpc_port}",
        CLOUDPROVIDER_GRPC_METRICS_ADDRESS=f"127.0.0.1:{metrics_port}",
        CLOUDPROVIDER_GRPC_FRONT="off",
    )
    argv = shlex.split(command)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudprovider_grpc", *argv[1:]],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the server logs this line once it serves
        assert first, "serve printed nothing"
        yield Served(grpc_port, metrics_port, first.strip())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_every_session_and_printed_line_is_checked() -> None:
    assert SESSIONS and PRINTED
    for block in SESSIONS:
        assert block.lang == "console" and block.body.startswith("$ cloudprovider-grpc "), block.where


@pytest.mark.parametrize("block", PRINTED, ids=lambda b: b.where)
def test_serve_prints_what_the_page_shows(block: Block) -> None:
    command = block.marker.removeprefix("<!-- printed by: ").removesuffix(" -->")
    with serving(command) as served:
        got = json.loads(served.canonical(served.first_line))
    shown = json.loads(block.body)
    assert set(got) == set(shown)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", got.pop("ts"))
    shown.pop("ts")
    assert got == shown


def steps(block: Block) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each `$ ` line of a console block."""
    found: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        else:
            found[-1][1].append(line)
    return found


@pytest.mark.parametrize("block", SESSIONS, ids=lambda b: b.where)
def test_a_session_prints_what_the_page_shows(block: Block) -> None:
    with serving("cloudprovider-grpc serve") as served:
        for command, expected in steps(block):
            argv = shlex.split(command)

            def run(argv: list[str] = argv) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "cloudprovider_grpc",
                        *argv[1:],
                        "--server",
                        f"127.0.0.1:{served.grpc_port}",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )

            def matches(argv: list[str] = argv, expected: list[str] = expected) -> str | None:
                out = run(argv)
                assert out.returncode == 0, (argv, out.stderr)
                return out.stdout if out.stdout.rstrip("\n").split("\n") == expected else None

            if argv[1] == "nodes":  # the machines a scale-up asked for are created in the background
                poll(matches, timeout=20, what=f"{command} to print the page's output", interval=0.3)
            else:
                out = run()
                assert out.returncode == 0, (command, out.stderr)
                assert out.stdout.rstrip("\n").split("\n") == expected, (block.where, command, out.stdout)
