"""The reference simulator: cluster-autoscaler's scale decisions, made through our gRPC API.

Library use (tests, users' CI)::

    from cloudprovider_grpc.simulator import load_scenario, run

    report = run(load_scenario("examples/scenarios/burst.yaml"), seed=0)
    ups = report.of_kind("scale-up")            # Decision objects: t, group, delta, reason, inputs
    assert ups[0].group == "general"
    report.write("out/")                        # report.json (+ timeline.png with matplotlib)

`run(scenario, server=None, seed=0)` starts our server in-process on the scenario's backend
(virtual time, deterministic) unless `server="HOST:PORT"` names a running one. The same scenario
and seed always give an identical report.json.

What is where:
- the input: `scenario.py` (the format), `flags.py` (CA's command line), `snapshot.py`,
  `cluster_objects.py`, `record.py`, `eventlog.py`, `replay.py` (scenarios from real clusters),
  `whatif.py` (edits);
- the cluster: `model.py` (resources, pod shapes, pods, nodes, templates), `predicates.py` (the
  scheduler's Filter plugins: fit, taints, affinity, inter-pod), `world.py` (controllers,
  scheduler, kubelets), `clock.py`;
- CA: `client.py` (its RPCs and caches), `engine/` (the loop and its phases: `scale_up/` with the
  orchestrator, estimator and expanders, `scale_down/` with the planner), `limits.py`,
  `backoff.py`;
- the output: `report.py`, `report_tables.py`, `html.py`, `compare.py`, `compare_report.py`;
- the wiring: `runner.py` (scenario to server), `cli.py` and `replay_cli.py` (the command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cloudprovider_grpc.simulator.report import Decision, Report
    from cloudprovider_grpc.simulator.runner import run
    from cloudprovider_grpc.simulator.scenario import Scenario, ScenarioError, load_scenario, parse_scenario

# The public names load on first use (PEP 562): `serve` and `check-config` share the command with
# `simulate`, and importing the engine (pydantic models, the decision loop) costs every start ~0.3 s.
_PUBLIC = {
    "Decision": "report",
    "Report": "report",
    "run": "runner",
    "Scenario": "scenario",
    "ScenarioError": "scenario",
    "load_scenario": "scenario",
    "parse_scenario": "scenario",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = ["Decision", "Report", "Scenario", "ScenarioError", "load_scenario", "parse_scenario", "run"]
