"""One simulation, split as CA's core is: the loop (`loop.py`, `Simulation`) holds one object per
phase and calls them in CA's order: the node lifecycle and cluster state (`cluster_state.py`, with
the scenario's node events in `node_events.py`), the scale-up phase (`scale_up/`: phase, requests
in flight and back-offs, orchestrator, estimator, expanders) and the scale-down phase
(`scale_down/`: phase, planner). No phase inherits another's state: each owns its own and is handed
the run context (`context.py`) and the few shared parts it reads (`group_options.py`,
`activity.py`, `costs.py`, `timeline.py`); `summary.py` builds the report."""

from cloudprovider_grpc.simulator.engine.loop import Simulation
from cloudprovider_grpc.simulator.engine.pricing import RpcPricing

__all__ = ["RpcPricing", "Simulation"]
