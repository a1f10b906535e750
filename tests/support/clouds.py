"""Clouds the test process owns, for the probes that must reach into the cloud: inject faults, make one
pool's project refuse us, count what the cloud really holds, or outlive a killed server.

A backend's `BackendUnderTest.cloud` starts one of these (its API emulator on loopback, in the test
process) and says how `cloudprovider-grpc serve` is pointed at it. Backends without a network cloud
(`sim`, whose cloud lives inside the server process) have none; the probes that need one skip them
and say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from cloudprovider_grpc.emulator.faults import FaultPlan


class ExternalCloud(Protocol):
    """A running emulated cloud and how to serve against it."""

    #: `serve` flags that select the backend and point it at this cloud
    serve_args: tuple[str, ...]
    #: environment for the server process (tokens the cloud accepts, ...)
    env: Mapping[str, str]
    #: node groups the server will have, with their (min, max)
    groups: Mapping[str, tuple[int, int]]

    def set_faults(self, rate: float, seed: int = 0) -> None:
        """Fail `rate` of the cloud's requests with 5xx (before and after processing), 429, timeouts
        and dropped connections; 0 turns faults off."""

    def set_slow(self, seconds: float) -> None:
        """Answer every request only after `seconds` (longer than the backend's read timeout)."""

    def machines(self, group: str) -> list[str]:
        """Ids of the machines the cloud holds for `group`, not counting ones being deleted."""

    def break_group(self, group: str) -> None:
        """Make every cloud call about `group` answer 403 (a misconfigured project or pool)."""

    def stop(self) -> None: ...


@dataclass
class CherryCloud:
    """The Cherry emulator with two pools in two projects of one team (pool2 in its own project, so
    one project can be made to answer 403 while the other works)."""

    tmp: Path
    token: str = "probe-cherry-token-5e1f"
    state_file: Path | None = None
    env: Mapping[str, str] = field(init=False)
    serve_args: tuple[str, ...] = field(init=False)
    groups: Mapping[str, tuple[int, int]] = field(default_factory=lambda: {"pool1": (1, 10), "pool2": (0, 5)})

    TEAM = 100
    OTHER_TEAM = 999
    PROJECTS = {"pool1": 11, "pool2": 22}

    def __post_init__(self) -> None:
        from cloudprovider_grpc.providers.cherry import CherryEmulator

        self.emulator = CherryEmulator(
            tokens={self.token: self.TEAM},
            projects={pid: self.TEAM for pid in self.PROJECTS.values()},
            deploy_seconds=0.5,
            state_file=self.state_file,
        ).start()
        self.tmp.mkdir(parents=True, exist_ok=True)
        config = self.tmp / "cherry-probe.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "cluster_name": "probe",
                    "nodes": [f"{lo}:{hi}:{name}" for name, (lo, hi) in self.groups.items()],
                    "cherry": {
                        "api-url": self.emulator.base_url,
                        # fast enough for tests, but real timeouts and retries
                        "rate-limit": 200,
                        "read-timeout": 1.0,
                        "connect-timeout": 1.0,
                        "retry-budget": 3.0,
                        "global": {
                            "project-id": self.PROJECTS["pool1"],
                            "plan": "cloud_vps_4",
                            "region": "eu_nord_1",
                            "os": "ubuntu_24_04",
                        },
                        "pools": {"pool2": {"project-id": self.PROJECTS["pool2"]}},
                    },
                }
            )
        )
        self.serve_args = ("--provider", "cherry", "--config", str(config))
        self.env = {"CHERRY_AUTH_TOKEN": self.token}

    def set_faults(self, rate: float, seed: int = 0) -> None:
        self.emulator.set_faults(FaultPlan(rate=rate, seed=seed, slow_seconds=1.5) if rate else None)

    def set_slow(self, seconds: float) -> None:
        self.emulator.set_faults(FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=seconds))

    def machines(self, group: str) -> list[str]:
        return [
            str(r["id"])
            for r in self.emulator.server_records(self.PROJECTS[group])
            if r["tags"].get("k8s-nodepool") == group and r.get("terminating_at") is None
        ]

    def break_group(self, group: str) -> None:
        with self.emulator.lock:
            self.emulator.projects[self.PROJECTS[group]] = self.OTHER_TEAM

    def stop(self) -> None:
        self.emulator.stop()
