"""Starting the real cluster-autoscaler and reading what it decided.

CA's decisions are read from its own log lines (the same words in 1.34.1, 1.36.1 and master):
- `Final scale-up plan: [{<group> <from>-><to> (max: <n>)} ...]` (V1, orchestrator.go),
- `Scale-down: removing empty node "<node>"` and `Scale-down: removing node <node>, ...` (V0,
  actuation/actuator.go),
- `Failed adding <n> nodes (<m> unseen previously) to group <group> due to <class>.<code>` (V1,
  clusterstate.go) and `Disabling scale-up for node group <group> until ...` (the backoff),
- `Some nodes that failed to create were removed` (V0, static_autoscaler.go: the failed placeholders
  deleted);
and from its status ConfigMap and Prometheus metrics.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.realca import builds
from tests.realca.cluster import ControlPlane, GrpcEndpoint, Process, env_without_proxies, wait_for
from tests.realca.kube import KubeError
from tests.support.servers import free_port

#: CA flags every run uses: short loops and timers so a phase takes seconds, not minutes.
FAST_FLAGS: dict[str, str] = {
    "scan-interval": "2s",
    "scale-down-delay-after-add": "0s",
    "scale-down-delay-after-delete": "0s",
    "scale-down-delay-after-failure": "2s",
    "scale-down-unneeded-time": "6s",
    "max-node-provision-time": "60s",
    "new-pod-scale-up-delay": "0s",
    "max-inactivity": "10m",
    "max-failing-time": "10m",
    "skip-nodes-with-local-storage": "false",
    "skip-nodes-with-system-pods": "false",
    "balance-similar-node-groups": "false",
    "max-graceful-termination-sec": "5",
    "initial-node-group-backoff-duration": "10m",
    "expander": "least-waste",
}


@dataclass(frozen=True)
class Decision:
    """One scale decision CA logged: a scale-up of `group` by `delta`, or the removal of `node`."""

    kind: str  # "scale-up" | "scale-down" | "failed-scale-up" | "backoff" | "failed-removed"
    group: str = ""
    delta: int = 0
    node: str = ""

    def __str__(self) -> str:
        if self.kind == "scale-up":
            return f"scale-up {self.group} +{self.delta}"
        if self.kind == "scale-down":
            return f"scale-down {self.node}"
        return f"{self.kind} {self.group}".strip()


_PLAN = re.compile(r"Final scale-up plan: \[(.*)\]")
_PLAN_ITEM = re.compile(r"\{(\S+) (\d+)->(\d+) \(max: \d+\)\}")
_EMPTY = re.compile(r'Scale-down: removing empty node "([^"]+)"')
_DRAIN = re.compile(r"Scale-down: removing node (\S+), utilization")
_FAILED = re.compile(r"Failed adding (\d+) nodes \(\d+ unseen previously\) to group (\S+) due to")
_BACKOFF = re.compile(r"Disabling scale-up for node group (\S+) until")
_REMOVED = re.compile(r"Some nodes that failed to create were removed")


def parse_decisions(log: str) -> list[Decision]:
    """CA's decisions, in the order it logged them."""
    out: list[Decision] = []
    for line in log.splitlines():
        if m := _PLAN.search(line):
            for item in _PLAN_ITEM.finditer(m[1]):
                out.append(Decision("scale-up", item[1], int(item[3]) - int(item[2])))
        elif m := _EMPTY.search(line) or _DRAIN.search(line):
            out.append(Decision("scale-down", node=m[1]))
        elif m := _FAILED.search(line):
            out.append(Decision("failed-scale-up", m[2], int(m[1])))
        elif m := _BACKOFF.search(line):
            out.append(Decision("backoff", m[1]))
        elif _REMOVED.search(line):
            out.append(Decision("failed-removed"))
    return out


class Autoscaler:
    """One cluster-autoscaler process against a control plane and our server."""

    def __init__(
        self,
        version: str,
        plane: ControlPlane,
        endpoint: GrpcEndpoint,
        workdir: Path,
        flags: Mapping[str, str] | None = None,
    ) -> None:
        self.version = version
        self.plane = plane
        workdir.mkdir(parents=True, exist_ok=True)
        self.metrics_port = free_port()
        self.status_name = f"cluster-autoscaler-status-{free_port()}"
        merged = {
            **FAST_FLAGS,
            "cloud-provider": "externalgrpc",
            "cloud-config": str(endpoint.cloud_config(workdir / "cloud-config.yaml")),
            "kubeconfig": str(plane.kubeconfig),
            "leader-elect": "false",
            "address": f"127.0.0.1:{self.metrics_port}",
            "namespace": "kube-system",
            "write-status-configmap": "true",
            "status-config-map-name": self.status_name,
            "logtostderr": "true",
            "v": "2",
            **(flags or {}),
        }
        argv = [str(builds.ca_binary(version)), *(f"--{k}={v}" for k, v in merged.items())]
        self.flags = merged
        self.process = Process(
            f"cluster-autoscaler-{version}", argv, workdir / "cluster-autoscaler.log", env_without_proxies()
        )
        self._seen = 0

    def stop(self) -> None:
        self.process.stop()

    def log(self) -> str:
        return self.process.log_text()

    def decisions(self) -> list[Decision]:
        return parse_decisions(self.log())

    def new_decisions(self) -> list[Decision]:
        """Decisions logged since the last call (phases of one run read only their own)."""
        all_ = self.decisions()
        fresh, self._seen = all_[self._seen :], len(all_)
        return fresh

    def wait_decisions(self, predicate, timeout: float, what: str) -> list[Decision]:
        """Wait until the decisions logged since the last `new_decisions` satisfy `predicate`."""
        found: list[Decision] = []

        def check() -> bool:
            nonlocal found
            found = self.decisions()[self._seen :]
            return bool(predicate(found))

        wait_for(what, check, timeout, watch=[self.process])
        self._seen += len(found)
        return found

    def metrics(self) -> dict[str, float]:
        """CA's own Prometheus metrics (`name{labels}` -> value)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    out[key] = float(value)
                except ValueError:
                    continue
        return out

    def status(self) -> str:
        """CA's status ConfigMap text ("" until CA wrote it)."""
        try:
            cm = self.plane.kube.get(f"/api/v1/namespaces/kube-system/configmaps/{self.status_name}")
        except KubeError:
            return ""
        return str(cm.get("data", {}).get("status", ""))

    def wait_running(self, timeout: float = 120) -> None:
        """Until CA has run a loop (its status ConfigMap exists)."""
        wait_for(
            "CA's first loop (status ConfigMap)", lambda: bool(self.status()), timeout, watch=[self.process]
        )

    def loops(self) -> int:
        """How many main loops CA has completed (its own function-duration histogram count)."""
        return int(
            self.metrics().get('cluster_autoscaler_function_duration_seconds_count{function="main"}', 0)
        )

    def settle(self, loops: int = 3, timeout: float = 120) -> None:
        """Wait until CA has run `loops` more main loops: before asserting that something did NOT
        happen, CA must have had the chance to do it."""
        start = self.loops()
        wait_for(f"{loops} CA loops", lambda: self.loops() >= start + loops, timeout, watch=[self.process])
