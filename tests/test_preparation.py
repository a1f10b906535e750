"""The preparation phase (tests/preparation/): tools are built before the first test, never by a
test. Read from the code: no test module holds a build or download command, and every support
function that does calls the gate first. Run in-process: the selection of steps, their order, a
failure that stops the run with its own output. And end to end: a run whose preparation fails
stops before any test, with the build's own words."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.preparation import gate
from tests.preparation.runner import (
    PreparationFailed,
    marker_filter,
    run,
    selected,
    with_needs,
)
from tests.preparation.steps import BY_NAME, STEPS, Step

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PREPARATION = TESTS / "preparation"
#: the first words of a command that builds or downloads (as list literals in the code)
BUILDERS = {
    ("go", "install"),
    ("go", "build"),
    ("go", "mod"),
    ("go", "get"),
    ("apt-get", "install"),
    ("apt-get", "download"),
    ("dpkg-deb", "-x"),
    ("dpkg", "-x"),
    ("mmdebstrap",),
}
#: podman subcommands that make an image (`podman.run("build", ...)`)
PODMAN_BUILDS = {"build", "import", "pull"}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.List | ast.Tuple):
        return [
            e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "" for e in node.elts
        ]
    return []


def _builds(node: ast.AST) -> bool:
    """Whether `node` is a command that builds or downloads."""
    words = _strings(node)
    if any(tuple(words[: len(b)]) == b for b in BUILDERS):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "run"
        and isinstance(getattr(node.func.value, "id", getattr(node.func.value, "attr", None)), str)
        and "podman" in str(getattr(node.func.value, "id", getattr(node.func.value, "attr", "")))
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in PODMAN_BUILDS
    )


def _calls_gate(function: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "may_build"
        for n in ast.walk(function)
    )


#: words without which a file holds no build command (most files are not parsed at all)
HINTS = ("go", "apt-get", "dpkg", "dpkg-deb", "mmdebstrap", "build", "import", "pull")


@functools.cache
def builders() -> tuple[tuple[Path, str, bool], ...]:
    """(file, function, calls the gate) for every function in tests/ holding a build command."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text()
        if PREPARATION in path.parents or not any(f'"{hint}"' in text for hint in HINTS):
            continue
        tree = ast.parse(text, str(path))
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef) and any(_builds(n) for n in ast.walk(function)):
                found.append((path, function.name, _calls_gate(function)))
    return tuple(found)


@pytest.mark.unit
def test_no_test_module_builds_or_downloads_anything_itself() -> None:
    inside = [f"{p.relative_to(ROOT)}::{f}" for p, f, _ in builders() if p.name.startswith("test_")]
    assert not inside, f"test modules that build or download: {inside} (make it a preparation step)"


@pytest.mark.unit
def test_every_builder_asks_the_gate_before_it_builds() -> None:
    found = builders()
    ungated = [f"{p.relative_to(ROOT)}::{f}" for p, f, gated in found if not gated]
    assert not ungated, f"builders that never call gate.may_build: {ungated}"
    # the scan is really scanning: the builders of Go tools, images and Debian packages are among them
    names = {f for _, f, _ in found}
    assert {"go_install", "go_build", "python_base", "debian_package"} <= names, names


@pytest.mark.unit
def test_the_scan_sees_a_build_command_in_a_test() -> None:
    tree = ast.parse('def test_x():\n    subprocess.run(["go", "install", "x@v1"])\n')
    assert any(_builds(n) for n in ast.walk(tree))
    tree = ast.parse('def test_y(podman):\n    podman.run("build", "-t", "x", ".")\n')
    assert any(_builds(n) for n in ast.walk(tree))


@pytest.mark.unit
def test_every_step_names_users_that_exist_and_needs_that_are_steps() -> None:
    for step in STEPS:
        assert step.users and all((ROOT / user).exists() for user in step.users), step.name
        assert all(need in BY_NAME for need in step.needs), step.name


@pytest.mark.unit
def test_the_selection_follows_paths_and_markers() -> None:
    everything = selected([TESTS], marker_filter(""))
    assert [s.name for s in everything] == [s.name for s in STEPS]
    assert selected([TESTS], marker_filter("unit")) == []
    fast = {s.name for s in selected([TESTS], marker_filter("not slow"))}
    assert "image" not in fast and "k8s-node" not in fast and {"front", "helm", "control-plane"} <= fast
    assert [s.name for s in selected([TESTS / "test_cli.py"], marker_filter(""))] == ["front"]
    conformance = {s.name for s in selected([TESTS / "test_conformance.py"], marker_filter(""))}
    assert conformance == {"front", "conformance"}
    # a step's needs come along: the image needs its bases, which need the host's packages
    assert {"go-base", "python-base", "host-packages", "front"} <= {s.name for s in with_needs(["image"])}


def _step(name: str, make, needs: tuple[str, ...] = (), cached: bool = False) -> Step:  # type: ignore[no-untyped-def]
    return Step(name, lambda: "v1", lambda: cached, make, users=("tests",), needs=needs, requires=frozenset())


@pytest.mark.unit
def test_steps_run_after_their_needs_and_report_each_state() -> None:
    order: list[str] = []
    lines: list[str] = []
    lock = threading.Lock()

    def make(name: str):  # type: ignore[no-untyped-def]
        def go() -> None:
            with lock:
                order.append(name)

        return go

    steps = [
        _step("b", make("b"), needs=("a",)),
        _step("a", make("a")),
        _step("c", make("c"), cached=True),
        _step("d", lambda: False),
    ]
    outcomes = run(steps, lines.append, parallel=2)
    assert order == ["a", "b"]
    states = {n: o.state for n, o in outcomes.items()}
    assert states == {"a": "built", "b": "built", "c": "cached", "d": "cached"}
    assert "prepare: a v1: started" in lines and any(
        line.startswith("prepare: b v1: built in") for line in lines
    )


@pytest.mark.unit
def test_a_failed_step_stops_the_run_with_the_end_of_its_output() -> None:
    def broken() -> None:
        raise RuntimeError("go build failed:\n" + "\n".join(f"line {i}" for i in range(100)))

    lines: list[str] = []
    with pytest.raises(PreparationFailed) as failed:
        run([_step("broken", broken), _step("after", lambda: None, needs=("broken",))], lines.append)
    message = str(failed.value)
    assert (
        message.startswith("preparing broken failed:") and "line 99" in message and "line 10\n" not in message
    )
    assert not any("after" in line and "started" in line for line in lines), lines


@pytest.mark.unit
def test_a_test_that_finds_its_tool_unprepared_fails_naming_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = tmp_path / "steps.json"
    outcomes.write_text('{"front": "cached", "promtool": "unavailable: no apt-get"}')
    monkeypatch.setenv(gate.ENV, str(outcomes))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.fail.Exception, match="helm was not prepared: the preparation step `helm`"):
        gate.may_build("helm")
    with pytest.raises(pytest.skip.Exception, match="no apt-get"):
        gate.may_build("promtool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no apt-get"):
        gate.may_build("promtool")
    monkeypatch.delenv(gate.ENV)
    gate.may_build("helm")  # outside a prepared run, builders build


@pytest.mark.integration
def test_a_failed_build_stops_the_run_before_any_test(tmp_path: Path) -> None:
    """A cold cache and a module proxy that answers nothing: the front's build fails in the
    preparation phase, and the run ends there with Go's own words, no test run."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "GOPROXY": "off", "CI": "true"}
    env.pop(gate.ENV, None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "tests/test_cli.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "the preparation phase stopped the run before any test: preparing front failed" in out, out[-3000:]
    assert "GOPROXY=off" in out, out[-3000:]
    assert " passed" not in out and "PASSED" not in out, out[-3000:]
