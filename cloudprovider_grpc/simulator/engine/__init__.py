"""One simulation, split as CA's core is: the loop (`loop`) calls the node lifecycle and cluster
state phase (`cluster_state`), the scale-up phase (`scale_up`) and the scale-down phase
(`scale_down`), which share the run's state (`state`)."""

from cloudprovider_grpc.simulator.engine.loop import Simulation
from cloudprovider_grpc.simulator.engine.pricing import RpcPricing

__all__ = ["RpcPricing", "Simulation"]
