"""The AliCloud ESS API emulator behind `--emulate` and the suite's tests: `core.py` holds the cloud
and its state machines, `rpc.py` how a request is taken in (routing, signatures, errors), `ess.py`
and `services.py` the actions, `emulator.py` puts them together, `seed.py` holds its demo data. It
may import the shared emulator base, `formats/`, `http/` and `core/`, never the cloud's own client
or driver, so that it stays an independent model of the real API."""

from cloudprovider_grpc.emulators.alicloud.emulator import AliCloudEmulator

__all__ = ["AliCloudEmulator"]
