"""`python -m tests.preparation [STEP ...]`: prepare the named steps (and what they need), or all."""

from __future__ import annotations

import sys
import time

from tests.preparation.runner import PreparationFailed, check_unavailable, run, summary, with_needs
from tests.preparation.steps import BY_NAME


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in BY_NAME]
    if unknown:
        print(f"unknown step(s) {', '.join(unknown)}; the steps are: {', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    steps = with_needs(argv or BY_NAME)
    started = time.monotonic()
    try:
        outcomes = run(steps, lambda line: print(line, flush=True))
        check_unavailable(outcomes)
    except PreparationFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    print(summary(outcomes, time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
