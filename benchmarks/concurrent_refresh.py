"""Two concurrent Refresh callers against a write caller, at full size.

    .venv/bin/python benchmarks/concurrent_refresh.py [--tries 10000]

For each shape (machines, pools), the sim cloud in-process with real worker threads and listings
that take 0-2 ms (tests/support/refresh_race.py): `tries` rounds of IncreaseSize(3) and an immediate
NodeGroupTargetSize, with two threads calling Refresh throughout. Prints how many targets read low
(below the target before plus 3); the suite runs 500 tries per shape
(tests/providers/test_state_version_cases.py). Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import refresh_race


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=10_000)
    args = parser.parse_args()
    for shape in ("machines", "pools"):
        start = time.monotonic()
        result = refresh_race.run(shape, args.tries)
        print(
            f"{shape}: {result.low} low targets in {result.tries:,} tries "
            f"({result.refreshes:,} concurrent Refreshes, {time.monotonic() - start:.1f}s)"
        )


if __name__ == "__main__":
    main()
