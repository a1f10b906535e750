"""The Exoscale (SKS nodepools and Instance Pools) API emulator behind `--emulate` and the suite's
tests: `core.py` holds the cloud and its state machines, `gateway.py` authentication and IAM,
`api.py` the handlers, `emulator.py` puts them together, `seed.py` holds its demo data. It may
import the shared emulator base, `formats/`, `http/` and `core/`, never the cloud's own client or
driver, so that it stays an independent model of the real API."""

from cloudprovider_grpc.emulators.exoscale.emulator import ExoscaleEmulator

__all__ = ["ExoscaleEmulator"]
