"""The scenario format: what a simulation runs, as validated YAML.

A scenario names the backend and its options (the node groups when the server is started
in-process), the workloads that arrive and leave over virtual time, the DaemonSets that add
overhead to every node, and the autoscaler's options under cluster-autoscaler's own flag names
and defaults (sigs-CA `pkg/config/flags/flags.go`), so a scenario reads like a CA command line.
Everything is validated up front with precise locations ("workloads.2.requests.cpu: ..."), so a
typo never silently becomes a default. `scenario.schema.json` beside this file is the JSON schema
of this model (regenerate with `python -m cloudprovider_grpc.simulator.scenario`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from cloudprovider_grpc.core.durations import parse_duration as go_duration
from cloudprovider_grpc.k8s.quantity import parse_quantity
from cloudprovider_grpc.simulator.limits import Limits

SCHEMA_PATH = Path(__file__).with_name("scenario.schema.json")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the offending key."""


def parse_duration(value: Any) -> float:
    """Seconds from a Go duration ("10s", "1h30m", "500ms") or a plain number of seconds, never
    negative: CA's duration flags take Go durations, so scenarios accept exactly those spellings."""
    seconds = go_duration(value)
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def _quantity_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError("a resource quantity must be a string like '500m' or '2Gi', or a number")
    text = str(value)
    parse_quantity(text)  # raises ValueError with the reason
    return text


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h))+$|^0$"},
            ]
        }
    ),
]
QuantityText = Annotated[
    str,
    BeforeValidator(_quantity_text),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}]}),
]
ResourceList = dict[str, QuantityText]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Toleration(_Strict):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class NodeSelectorRequirement(_Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> NodeSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class PodAffinityTerm(_Strict):
    """A required pod (anti-)affinity term: pods with these labels (matchLabels, same namespace)
    in the same domain of `topology_key` (kubernetes.io/hostname: the node; a zone label: the
    zone)."""

    label_selector: dict[str, str] = Field(min_length=1)
    topology_key: str = Field(min_length=1)


class TopologySpread(_Strict):
    """A topology spread constraint. Only DoNotSchedule filters nodes (ScheduleAnyway only scores,
    so the scheduler and CA may place pods regardless); `label_selector` defaults to the pod's
    own labels."""

    max_skew: int = Field(ge=1)
    topology_key: str = Field(min_length=1)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "DoNotSchedule"
    label_selector: dict[str, str] | None = None
    min_domains: int = Field(1, ge=1)


class PodDisruptionBudget(_Strict):
    """A PDB over the workload's pods; give exactly one of the two."""

    min_available: int | None = Field(None, ge=0)
    max_unavailable: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one(self) -> PodDisruptionBudget:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("give exactly one of min_available and max_unavailable")
        return self


class Container(_Strict):
    name: str = "main"
    requests: ResourceList = Field(default_factory=dict)


class ReplicaStep(_Strict):
    """From `at` on, the workload wants `replicas` pods (a Deployment scaled by HPA or a person)."""

    at: Duration
    replicas: int = Field(ge=0)


class Workload(_Strict):
    """Pods of one controller. `kind` decides how CA treats them when draining a node:
    Deployment and Job pods are recreated elsewhere; bare Pods have no controller and block
    scale-down (sigs-CA `pkg/simulator/drainability/rules/replicacount`)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    kind: Literal["Deployment", "Job", "Pod"] = "Deployment"
    namespace: str = "default"
    replicas: int = Field(default=1, ge=0)
    schedule: list[ReplicaStep] = Field(default_factory=list)
    start: Duration = 0.0
    end: Duration | None = None
    run_time: Duration | None = None
    requests: ResourceList | None = None
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    node_affinity: list[NodeSelectorRequirement] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    priority: int = 0
    annotations: dict[str, str] = Field(default_factory=dict)
    local_storage: bool = False
    #: true: a PDB exists (what skip-nodes-with-system-pods asks of kube-system pods) without
    #: limiting evictions; {min_available: N} or {max_unavailable: N}: a budget drains must respect
    pdb: bool | PodDisruptionBudget = False
    #: pod labels (default {app: <name>}), what affinity terms and spread constraints select
    labels: dict[str, str] = Field(default_factory=dict)
    host_ports: list[int] = Field(default_factory=list)
    pod_affinity: list[PodAffinityTerm] = Field(default_factory=list)
    pod_anti_affinity: list[PodAffinityTerm] = Field(default_factory=list)
    topology_spread: list[TopologySpread] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Workload:
        if self.requests is not None and self.containers:
            raise ValueError("give either 'requests' (one container) or 'containers', not both")
        if self.end is not None and self.end <= self.start:
            raise ValueError("'end' must be after 'start'")
        if self.run_time is not None and self.kind != "Job":
            raise ValueError("'run_time' applies to kind Job only")
        if any(not 1 <= p <= 65535 for p in self.host_ports):
            raise ValueError("host_ports must be between 1 and 65535")
        times = [s.at for s in self.schedule]
        if times != sorted(times):
            raise ValueError("'schedule' steps must be in time order")
        return self

    def container_requests(self) -> list[dict[str, str]]:
        if self.requests is not None:
            return [dict(self.requests)]
        return [dict(c.requests) for c in self.containers]

    def pod_labels(self) -> dict[str, str]:
        return dict(self.labels) if self.labels else {"app": self.name}

    def replicas_at(self, t: float) -> int:
        """Desired replicas at virtual second t (0 outside [start, end))."""
        if t < self.start or (self.end is not None and t >= self.end):
            return 0
        wanted = self.replicas
        for step in self.schedule:
            if step.at <= t:
                wanted = step.replicas
        return wanted


class DaemonSet(_Strict):
    """Per-node overhead: one pod on every node it can run on (CA adds these to templates too)."""

    name: str
    namespace: str = "kube-system"
    requests: ResourceList = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=lambda: [Toleration(operator="Exists")])


class GroupOverride(_Strict):
    """CA-side bounds for a node group, replacing what NodeGroups reports (a what-if knob: the
    server still enforces its own bounds, so raising max above the server's fails IncreaseSize)."""

    min_size: int | None = Field(None, ge=0)
    max_size: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> GroupOverride:
        if self.min_size is not None and self.max_size is not None and self.min_size > self.max_size:
            raise ValueError(f"min_size {self.min_size} is above max_size {self.max_size}")
        return self


class NodeTaint(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class StaticNode(_Strict):
    """Nodes that belong to no node group (NodeGroupForNode answers none): CA never scales or
    removes them, but pods run on them and they count against the cluster-wide limits and
    max-nodes-total. `count` > 1 names them NAME-0, NAME-1, ..."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    count: int = Field(1, ge=1)
    capacity: ResourceList = Field(default_factory=lambda: {"cpu": "4", "memory": "16Gi"})
    pods: int = Field(110, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[NodeTaint] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)


class NodeEvent(_Strict):
    """Something that happens to a registered node at `at` (or as soon as it registers after
    that): it turns NotReady or Ready again, gets annotations or taints, is drained, or someone
    else (an operator, a previous CA instance) starts deleting it through the cloud. Node names are
    the ones the simulator gives registered machines (`general-0`, ...) or static node names."""

    at: Duration = 0.0
    node: str = ""
    #: instead of `node`: every node of this node group registered when the event is due
    group: str = ""
    ready: bool | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    taints: list[NodeTaint] = Field(default_factory=list)
    remove_taints: list[str] = Field(default_factory=list)
    delete: bool = False
    #: `kubectl drain`: cordon the node and evict its pods (DaemonSet pods stay)
    drain: bool = False

    @model_validator(mode="after")
    def _one_target(self) -> NodeEvent:
        if bool(self.node) == bool(self.group):
            raise ValueError("give exactly one of 'node' and 'group'")
        return self


EXPANDERS = ("random", "most-pods", "least-waste", "least-nodes", "price", "priority")


class AutoscalerOptions(_Strict):
    """cluster-autoscaler flags the simulator honours, spelled and defaulted as CA does."""

    scan_interval: Duration = Field(10.0, alias="scan-interval")
    expander: str = Field("least-waste", alias="expander")
    max_nodes_total: int = Field(0, ge=0, alias="max-nodes-total")
    cores_total: str = Field("0:320000", alias="cores-total")
    memory_total: str = Field("0:6400000", alias="memory-total")
    #: "<gpu_type>:<min>:<max>", repeatable like the flag; the type is the value of the cloud's GPU
    #: label (GPULabel RPC) on a node
    gpu_total: list[str] = Field(default_factory=list, alias="gpu-total")
    max_node_provision_time: Duration = Field(900.0, alias="max-node-provision-time")
    max_nodes_per_scaleup: int = Field(1000, ge=1, alias="max-nodes-per-scaleup")
    balance_similar_node_groups: bool = Field(False, alias="balance-similar-node-groups")
    balancing_ignore_label: list[str] = Field(default_factory=list, alias="balancing-ignore-label")
    memory_difference_ratio: float = Field(0.015, ge=0, alias="memory-difference-ratio")
    max_allocatable_difference_ratio: float = Field(0.05, ge=0, alias="max-allocatable-difference-ratio")
    max_free_difference_ratio: float = Field(0.05, ge=0, alias="max-free-difference-ratio")
    initial_node_group_backoff_duration: Duration = Field(300.0, alias="initial-node-group-backoff-duration")
    max_node_group_backoff_duration: Duration = Field(1800.0, alias="max-node-group-backoff-duration")
    node_group_backoff_reset_timeout: Duration = Field(10800.0, alias="node-group-backoff-reset-timeout")
    expendable_pods_priority_cutoff: int = Field(-10, alias="expendable-pods-priority-cutoff")
    new_pod_scale_up_delay: Duration = Field(0.0, alias="new-pod-scale-up-delay")
    scale_down_enabled: bool = Field(True, alias="scale-down-enabled")
    scale_down_utilization_threshold: float = Field(0.5, ge=0, le=1, alias="scale-down-utilization-threshold")
    scale_down_gpu_utilization_threshold: float = Field(
        0.5, ge=0, le=1, alias="scale-down-gpu-utilization-threshold"
    )
    scale_down_unneeded_time: Duration = Field(600.0, alias="scale-down-unneeded-time")
    scale_down_delay_after_add: Duration = Field(600.0, alias="scale-down-delay-after-add")
    scale_down_delay_after_delete: Duration = Field(0.0, alias="scale-down-delay-after-delete")
    scale_down_delay_after_failure: Duration = Field(180.0, alias="scale-down-delay-after-failure")
    scale_down_non_empty_candidates_count: int = Field(
        30, ge=0, alias="scale-down-non-empty-candidates-count"
    )
    unremovable_node_recheck_timeout: Duration = Field(300.0, alias="unremovable-node-recheck-timeout")
    max_scale_down_parallelism: int = Field(10, ge=1, alias="max-scale-down-parallelism")
    max_drain_parallelism: int = Field(1, ge=1, alias="max-drain-parallelism")
    ignore_daemonsets_utilization: bool = Field(False, alias="ignore-daemonsets-utilization")
    skip_nodes_with_system_pods: bool = Field(True, alias="skip-nodes-with-system-pods")
    skip_nodes_with_local_storage: bool = Field(True, alias="skip-nodes-with-local-storage")
    scale_down_unready_time: Duration = Field(1200.0, alias="scale-down-unready-time")
    scale_down_unready_enabled: bool = Field(True, alias="scale-down-unready-enabled")
    max_total_unready_percentage: float = Field(45.0, ge=0, le=100, alias="max-total-unready-percentage")
    ok_total_unready_count: int = Field(3, ge=0, alias="ok-total-unready-count")
    #: the cluster-autoscaler release modelled (MAJOR.MINOR): behaviours that changed between
    #: releases follow it (from 1.35, a group answering GetOptions has no node startup grace)
    version: str = Field("1.34", pattern=r"^1\.\d+$", alias="version")

    def release(self) -> tuple[int, int]:
        major, minor = self.version.split(".")
        return int(major), int(minor)

    @field_validator("expander")
    @classmethod
    def _known_chain(cls, value: str) -> str:
        names = [n.strip() for n in value.split(",")]
        for n in names:
            if n not in EXPANDERS:
                raise ValueError(f"unknown expander {n!r} (known: {', '.join(EXPANDERS)})")
        if len(set(names)) != len(names):
            raise ValueError("an expander may appear only once in the chain")
        if "random" in names[:-1]:
            raise ValueError("'random' always picks one option, so nothing may follow it")
        return ",".join(names)

    @field_validator("cores_total", "memory_total")
    @classmethod
    def _min_max(cls, value: str) -> str:
        m = re.fullmatch(r"(\d+):(\d+)", value.strip())
        if not m or int(m.group(1)) > int(m.group(2)):
            raise ValueError(f"{value!r} is not MIN:MAX with MIN <= MAX")
        return value.strip()

    def limits(self, name: str) -> tuple[int, int]:
        lo, hi = getattr(self, name).split(":")
        return int(lo), int(hi)

    @field_validator("gpu_total")
    @classmethod
    def _gpu_limits(cls, value: list[str]) -> list[str]:
        seen = set()
        for spec in value:
            m = re.fullmatch(r"([^:\s]+):(\d+):(\d+)", spec.strip())
            if not m or int(m.group(2)) > int(m.group(3)):
                raise ValueError(f"{spec!r} is not <gpu_type>:<min>:<max> with min <= max")
            if m.group(1) in seen:
                raise ValueError(f"gpu type {m.group(1)!r} is limited twice")
            seen.add(m.group(1))
        return [v.strip() for v in value]

    def resource_limits(self) -> Limits:
        return Limits.from_flags(self.limits("cores_total"), self.limits("memory_total"), self.gpu_total)


class Scenario(_Strict):
    """One simulation: see the module docstring and examples/scenarios/."""

    name: str
    description: str = ""
    duration: Duration
    start_time: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    provider: str = "sim"
    cloud: dict[str, Any] = Field(default_factory=dict)
    node_groups: dict[str, GroupOverride] = Field(default_factory=dict)
    scheduler: Literal["least-allocated", "most-allocated"] = "least-allocated"
    #: "ca" repeats CA's RPC call sites exactly; "lean" keeps NodeGroupForNode answers across loops
    #: (same decisions, far fewer RPCs; for very long or very large runs)
    rpc_profile: Literal["ca", "lean"] = "ca"
    autoscaler: AutoscalerOptions = Field(default_factory=AutoscalerOptions)
    priorities: dict[int, list[str]] = Field(default_factory=dict)
    daemonsets: list[DaemonSet] = Field(default_factory=list)
    workloads: list[Workload] = Field(default_factory=list)
    #: how long a registered node stays NotReady before its kubelet reports Ready
    node_ready_delay: Duration = 0.0
    static_nodes: list[StaticNode] = Field(default_factory=list)
    node_events: list[NodeEvent] = Field(default_factory=list)
    #: the currency or unit of the backend's PricingNodePrice answers, shown with the cost
    #: (default: what the backend is known to price in, else "price units")
    cost_unit: str = ""

    @model_validator(mode="after")
    def _checks(self) -> Scenario:
        names = [w.name for w in self.workloads]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"workload names must be unique: {', '.join(dupes)}")
        if "priority" in self.autoscaler.expander.split(",") and not self.priorities:
            raise ValueError("the priority expander needs a 'priorities' map (priority -> group regexes)")
        for prio, patterns in self.priorities.items():
            for p in patterns:
                try:
                    re.compile(p)
                except re.error as exc:
                    raise ValueError(f"priorities.{prio}: bad regex {p!r}: {exc}") from None
        if self.autoscaler.scan_interval <= 0:
            raise ValueError("autoscaler.scan-interval must be positive")
        return self


def _format_errors(exc: ValidationError) -> str:
    """Every problem, in the wording configuration errors use (an unknown key with the nearest
    known one), not pydantic's."""
    from cloudprovider_grpc.core.pydantic_errors import problems

    return "; ".join(f"{p.key}: {p.problem}" for p in problems(exc, Scenario))


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate an already-loaded mapping (e.g. from a test) into a Scenario."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping at the top level")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {_format_errors(exc)}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        from cloudprovider_grpc.config.settings import yaml_problem

        raise ScenarioError(yaml_problem(p, exc)) from None
    return parse_scenario(data, str(p))


def json_schema() -> dict[str, Any]:
    return Scenario.model_json_schema(by_alias=True)


def main() -> None:
    SCHEMA_PATH.write_text(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
