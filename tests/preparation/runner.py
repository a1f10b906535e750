"""The preparation phase: every step the selected tests need (steps.py), run before the first test,
several at once, each with a line when it starts and one when it is ready.

Run by tests/conftest.py in the process that controls the run (xdist's controller, before it
starts its workers; the only process without xdist), and by `python -m tests.preparation`. What
each step came to is written to a file named in the environment (gate.py), which the test
processes inherit. A step whose prerequisite is missing on this machine (Go, apt-get, root) is
"unavailable": outside CI its tests skip with the reason, under CI=true the run stops. A step that
fails for any other reason stops the run with the end of its own output, before any test ran.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.preparation import gate
from tests.preparation.steps import BY_NAME, STEPS, Step
from tests.support.gotools import in_ci

ROOT = Path(__file__).resolve().parents[2]
#: steps that run at once: Go builds use both cores between downloads and image layers
PARALLEL = 3
#: the lines of a failed build's output shown when it stops the run
TAIL = 40


class PreparationFailed(RuntimeError):
    """A step failed: the message is the step's name and the end of its output."""


@dataclass
class Outcome:
    step: Step
    state: str  # "cached", "built", "unavailable: why", "failed"
    seconds: float = 0.0
    detail: str = ""


def missing_prerequisite(step: Step) -> str | None:
    """Why `step` cannot run on this machine at all, or None."""
    from cloudprovider_grpc.front.gotoolchain import go_binary

    if "go" in step.requires and go_binary() is None:
        return "Go is not installed"
    if "apt" in step.requires and (shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None):
        return "apt-get and dpkg-deb are needed to fetch Debian's packages"
    if "root" in step.requires and os.geteuid() != 0:
        return "the real-node tier runs as root only"
    return None


def selected(paths: Sequence[Path], wanted: Callable[[frozenset[str]], bool]) -> list[Step]:
    """The steps some selected test uses: one of `paths` (absolute) overlaps one of the step's
    users, and the marker expression `wanted` admits the step's markers. A step others need comes
    along."""

    def overlaps(users: Iterable[str]) -> bool:
        for user in users:
            target = ROOT / user
            for path in paths:
                if path == target or path in target.parents or target in path.parents:
                    return True
        return False

    return with_needs({s.name for s in STEPS if overlaps(s.users) and wanted(s.markers)})


def with_needs(names: Iterable[str]) -> list[Step]:
    """The named steps and every step they need, in the order of STEPS."""
    chosen = set(names)
    pending = list(chosen)
    while pending:
        for need in BY_NAME[pending.pop()].needs:
            if need not in chosen:
                chosen.add(need)
                pending.append(need)
    return [s for s in STEPS if s.name in chosen]


def marker_filter(expression: str) -> Callable[[frozenset[str]], bool]:
    """`-m EXPRESSION` as a test of a step's markers (every step passes without one)."""
    if not expression:
        return lambda _markers: True
    from _pytest.mark.expression import Expression  # pytest's own parser of `-m`

    compiled = Expression.compile(expression)
    return lambda markers: compiled.evaluate(lambda name, **kwargs: not kwargs and name in markers)


def _tail(exc: BaseException) -> str:
    lines = (str(exc).strip() or type(exc).__name__).splitlines()
    return "\n".join(lines[-TAIL:])


def run(steps: Sequence[Step], say: Callable[[str], None], parallel: int = PARALLEL) -> dict[str, Outcome]:
    """Run `steps` (their needs first), `parallel` at a time; raises PreparationFailed on the first
    failure, once the steps running beside it have ended."""
    outcomes: dict[str, Outcome] = {}
    lock = threading.Condition()
    waiting = list(steps)
    running: set[str] = set()
    names = {s.name for s in steps}
    failed: list[Outcome] = []

    def ready_to_start(step: Step) -> bool:
        return all(
            n in outcomes and outcomes[n].state in ("cached", "built") for n in step.needs if n in names
        )

    def blocked(step: Step) -> str | None:
        for need in step.needs:
            if need in outcomes and outcomes[need].state not in ("cached", "built"):
                return f"needs {need}, which is {outcomes[need].state}"
        return None

    def one(step: Step) -> None:
        started = time.monotonic()
        label = f"{step.name} {step.version()}"
        try:
            if step.cached():
                outcome = Outcome(step, "cached")
            else:
                say(f"prepare: {label}: started")
                outcome = Outcome(step, "cached" if step.make() is False else "built")
        except BaseException as exc:  # reported, and the run stopped, by the caller
            outcome = Outcome(step, "failed", detail=_tail(exc))
        outcome.seconds = time.monotonic() - started
        word = outcome.state if outcome.state != "failed" else "FAILED"
        say(f"prepare: {label}: {word} in {outcome.seconds:.1f} s")
        with lock:
            outcomes[step.name] = outcome
            running.discard(step.name)
            if outcome.state == "failed":
                failed.append(outcome)
            lock.notify_all()

    with lock:
        while waiting or running:
            if failed:
                waiting.clear()
            for step in list(waiting):
                if len(running) >= parallel:
                    break
                why = missing_prerequisite(step) or blocked(step)
                if why is not None:
                    waiting.remove(step)
                    outcomes[step.name] = Outcome(step, f"unavailable: {why}")
                    say(f"prepare: {step.name}: unavailable ({why})")
                    continue
                if ready_to_start(step):
                    waiting.remove(step)
                    running.add(step.name)
                    threading.Thread(
                        target=one, args=(step,), name=f"prepare-{step.name}", daemon=True
                    ).start()
            if waiting or running:
                lock.wait(1.0)
    if failed:
        first = failed[0]
        raise PreparationFailed(f"preparing {first.step.name} failed:\n{first.detail}")
    return outcomes


def check_unavailable(outcomes: dict[str, Outcome]) -> None:
    """Under CI a missing step stops the run: CI must never pass without having run its tools."""
    missing = {n: o.state for n, o in outcomes.items() if o.state.startswith("unavailable")}
    if missing and in_ci():
        raise PreparationFailed(
            "CI=true and these could not be prepared:\n"
            + "\n".join(f"  {name}: {state}" for name, state in missing.items())
        )


def publish(outcomes: dict[str, Outcome]) -> Path:
    """The outcomes written for the test processes, and named in their environment (gate.py)."""
    path = Path(tempfile.mkdtemp(prefix="cpg-prepared-")) / "steps.json"
    path.write_text(json.dumps({name: o.state for name, o in outcomes.items()}, indent=1))
    os.environ[gate.ENV] = str(path)
    return path


def summary(outcomes: dict[str, Outcome], seconds: float) -> str:
    built = [o for o in outcomes.values() if o.state == "built"]
    return (
        f"prepare: {len(outcomes)} step(s) in {seconds:.1f} s: {len(built)} built or fetched"
        f" ({', '.join(o.step.name for o in built) or 'none'}),"
        f" {sum(o.state == 'cached' for o in outcomes.values())} cached,"
        f" {sum(o.state.startswith('unavailable') for o in outcomes.values())} unavailable"
    )
