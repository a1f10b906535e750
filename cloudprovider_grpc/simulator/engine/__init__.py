"""One simulation, split as CA's core is: the loop (`loop.py`) calls the node lifecycle and
cluster state phase (`cluster_state.py`), the scale-up phase (`scale_up/`: phase, orchestrator,
estimator, expanders) and the scale-down phase (`scale_down/`: phase, planner), which share the
run's state (`state.py`)."""

from cloudprovider_grpc.simulator.engine.loop import Simulation
from cloudprovider_grpc.simulator.engine.pricing import RpcPricing

__all__ = ["RpcPricing", "Simulation"]
