"""The StackPointCloud API emulator behind `--emulate` and the suite's tests: `state.py` holds the
cloud and its node state machine, `emulator.py` serves it over HTTP, `seed.py` holds its demo data.
It may import the shared emulator base, `formats/`, `http/` and `core/`, never the cloud's own
client or driver, so that it stays an independent model of the real API."""

from cloudprovider_grpc.emulators.spc.emulator import SpcEmulator

__all__ = ["SpcEmulator"]
