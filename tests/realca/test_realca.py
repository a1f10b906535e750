"""The real cluster-autoscaler binary driving our server end to end (issue 13).

Layout (what runs where, to stay in CI's budget):
- every backend of `tests/support/backends.py` with an `e2e_config`, CA 1.36.1: scale-up, named-node
  scale-down, the cloud's failure path (`scenarios.generic`);
- the sim cloud with CA 1.36.1 and master: the full set (`test_sim_full`);
- the sim cloud with CA 1.34.1 (legacy wire fields): scale-up, scale-down, per-group options.
Each test is one CA run through several phases; CA's decisions are read from its own log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realca import scenarios as sc
from tests.realca.cluster import ControlPlane
from tests.support.backends import BACKENDS, BackendUnderTest

pytestmark = [pytest.mark.realca, pytest.mark.timeout(900)]

E2E_BACKENDS = [b for b in BACKENDS if b.e2e_config]


@pytest.mark.parametrize("be", E2E_BACKENDS, ids=lambda b: b.name)
def test_backend_end_to_end(control_plane: ControlPlane, be: BackendUnderTest, tmp_path: Path) -> None:
    with sc.run(control_plane, be, "1.36.1", tmp_path) as r:
        try:
            sc.generic(r, be)
        except BaseException:
            print(r.diagnostics())
            raise
