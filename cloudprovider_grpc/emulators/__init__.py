"""Shared base for the cloud API emulators that ship with the product (see server.py)."""

from cloudprovider_grpc.emulators.faults import FAULT_KINDS, FaultPlan
from cloudprovider_grpc.emulators.server import EmulatorServer, HttpProblem, LogEntry, Request, Response

__all__ = ["FAULT_KINDS", "EmulatorServer", "FaultPlan", "HttpProblem", "LogEntry", "Request", "Response"]
