"""The suite's order under xdist: the longest tests start first, one per worker.

xdist's `worksteal` hands each worker a contiguous share of the collection (the first quarter to
one, the second to the next, with four workers) and later moves tests from the end of a busy
worker's queue to an idle one. A test of several minutes that sits deep in a share therefore
starts late and sets the end of the whole run, while the other workers are already idle. Placing
the longest tests at the heads of the shares, the heaviest dealt first and round the shares, starts
them all at once; the short tests fill in around them. The order within a module is kept, and a
module with module-scoped fixtures moves whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

#: node-id prefixes of the suite's longest tests, heaviest first (minutes each on a loaded
#: two-core machine; see the `--durations` table a run prints). A prefix ending in `.py` moves its
#: module whole; one naming a test moves each of its parametrized cases on its own.
LONGEST = (
    "tests/realnode/test_chart.py",
    "tests/probes/test_fuzz.py::test_every_fuzzed_request_gets_the_same_answer",
    "tests/simulator/test_record_cluster.py::test_a_watch_too_old",
    "tests/simulator/test_one_clock.py::",
    "tests/test_release.py::test_wheel_installs",
    "tests/ha/test_election.py::test_ten_kills",
    "tests/simulator/test_report_pages.py",
    "tests/probes/test_fuzz.py::test_fuzzing_every_rpc",
)


def long_first(items: Sequence[pytest.Item], shares: int) -> list[pytest.Item]:
    """`items` reordered so that the tests LONGEST names head the `shares` contiguous shares."""
    if shares < 2:
        return list(items)
    units: list[list[pytest.Item]] = []
    taken: set[int] = set()
    for prefix in LONGEST:
        matching = [(i, item) for i, item in enumerate(items) if item.nodeid.startswith(prefix)]
        matching = [(i, item) for i, item in matching if i not in taken]
        if prefix.endswith(".py"):
            units.extend([[item for _, item in matching]] if matching else [])
        else:
            units.extend([item] for _, item in matching)
        taken.update(i for i, _ in matching)
    rest = [item for i, item in enumerate(items) if i not in taken]
    heads: list[list[pytest.Item]] = [[] for _ in range(shares)]
    for n, unit in enumerate(units):
        heads[n % shares].extend(unit)
    # each share: its long tests, then as many of the rest as make the shares equal in length
    size = len(items) / shares
    out: list[pytest.Item] = []
    for k in range(shares):
        out.extend(heads[k])
        fill = round(size * (k + 1)) - len(out)
        out.extend(rest[:fill])
        del rest[:fill]
    out.extend(rest)
    return out
