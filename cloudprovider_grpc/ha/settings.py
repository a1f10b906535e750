"""The leader-election settings (`leader_elect:` in the configuration, `--leader-elect*` on the
command line). They sit beside the election that reads them; the configuration holds them as one of
its parts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from cloudprovider_grpc.core.durations import parse_duration


class LeaderElection(BaseModel):
    """`--leader-elect` and its companions, named and defaulted as cluster-autoscaler's own
    (lease 15s, renew deadline 10s, retry period 2s), with the same consistency rules as
    client-go's leader election: lease > renew deadline > 1.2 x retry period."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = "cloudprovider-grpc"
    #: empty: the pod's own namespace (the service account's), else "default"
    resource_namespace: str = ""
    #: empty: the pod name (POD_NAME, else the host name, which Kubernetes sets to the pod name)
    identity: str = ""
    #: empty: in-cluster configuration (the pod's service account), else this kubeconfig file
    kubeconfig: Path | None = None
    #: how often a standby lists the cloud to stay warm (read only)
    standby_refresh: float = 30.0
    #: at a hand-over, how long the old leader keeps its port open (forwarding every call) after its
    #: successor answers: the time a Service needs to see the new leader ready (a readiness probe
    #: period of 1 s, and the endpoint's way to every node's proxy)
    handover_linger: float = 3.0

    @field_validator(
        "lease_duration",
        "renew_deadline",
        "retry_period",
        "standby_refresh",
        "handover_linger",
        mode="before",
    )
    @classmethod
    def _duration(cls, v: Any, info: Any) -> float:
        seconds = parse_duration(v)
        if seconds < 0 or (seconds == 0 and info.field_name != "handover_linger"):
            raise ValueError("must be positive")
        return seconds

    @field_validator("resource_name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", v):
            raise ValueError(f"{v!r} is not a Kubernetes object name (lower case, digits, '-', '.')")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElection:
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"lease duration {self.lease_duration:g}s must be longer than the renew deadline "
                f"{self.renew_deadline:g}s (a leader must give up before others may take over)"
            )
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise ValueError(
                f"renew deadline {self.renew_deadline:g}s must be longer than 1.2 x the retry period "
                f"{self.retry_period:g}s"
            )
        if self.kubeconfig is not None and not Path(self.kubeconfig).is_file():
            raise ValueError(f"kubeconfig: file {str(self.kubeconfig)!r} does not exist")
        return self
