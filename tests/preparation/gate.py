"""The rule that tests only use tools: every builder in the suite's support code asks `may_build`
before it builds or downloads anything (after it has looked for its cached result).

The preparation phase (tests/preparation/runner.py) runs before the first test, in the process that
controls the run, and then writes what each step came to into a file it names in
`CLOUDPROVIDER_GRPC_SUITE_PREPARED`. The test processes (xdist's workers inherit the environment,
and a run without xdist is the controlling process itself) find that variable set: from then on a
builder asked to build is a test that found its tool missing, which fails at once with the step's
name (or skips with the step's reason, where the step could not run on this machine and the run is
not CI). Outside a test run (`python -m tests.preparation`, the benchmarks) the variable is unset and
builders build as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ENV = "CLOUDPROVIDER_GRPC_SUITE_PREPARED"


def _outcomes() -> dict[str, str] | None:
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in found.items()}


def active() -> bool:
    """Whether this process runs tests after a preparation phase (builders must not build)."""
    return _outcomes() is not None


def outcome(step: str) -> str | None:
    """What `step` came to in this run's preparation; None outside a prepared run."""
    outcomes = _outcomes()
    return None if outcomes is None else outcomes.get(step, "not selected")


def may_build(step: str) -> None:
    """Return when `step`'s builder may build now; otherwise end the calling test.

    `step` is a name from tests/preparation/steps.py. Outcomes: "ready" (yet its result is missing:
    something removed it), "unavailable: why" (skipped outside CI, a failure under CI=true),
    "not selected" or absent (this run's selection did not ask for it)."""
    outcomes = _outcomes()
    if outcomes is None:
        return
    outcome = outcomes.get(step, "not selected")
    if outcome.startswith("unavailable:"):
        from tests.deploy_support.tools import unavailable

        unavailable(step, outcome.removeprefix("unavailable:").strip())
    hint = f"`python -m tests.preparation {step}` prepares it by hand"
    if outcome == "ready":
        pytest.fail(f"{step}: prepared before the run, but its result is gone now; {hint}", pytrace=False)
    pytest.fail(
        f"{step} was not prepared: the preparation step `{step}` did not run for this selection of tests"
        f" (tests never build a tool themselves); {hint}",
        pytrace=False,
    )
