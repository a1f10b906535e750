"""The `sim` backend: an in-memory cloud behind the same Driver contract as the real clouds.

It is the zero-configuration default of `cloudprovider-grpc serve`, the cloud of CI pipelines and
of the reference simulator. Machines boot for `provisioning_delay` seconds (instanceCreating) and
terminate for `deletion_delay` seconds (instanceDeleting) on an injectable clock, so the simulator
can run a day in seconds. Failure injection: `stockout_after` caps how many machines a group can
ever have at once (further creates fail with an out-of-resources error, class 1) and `error_rate`
fails that fraction of creates with a generic error (class 99), drawn from a seeded RNG.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cloudprovider_grpc.k8s.template import NodeTemplate, Taint
from cloudprovider_grpc.providers.contract import AutoscalingOptions, ErrorClass, InstanceError, InstanceState
from cloudprovider_grpc.providers.driver import (
    CloudError,
    DriverBase,
    GroupConfig,
    Machine,
    MachineDriver,
    MachineGone,
    Pool,
    PoolDriver,
    RemoveOutcome,
)

GPU_RESOURCE = "nvidia.com/gpu"
GPU_LABEL = "cloudprovider-grpc.io/gpu"
_OPTION_FIELDS = set(AutoscalingOptions.__dataclass_fields__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaintSpec(_Strict):
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @field_validator("effect")
    @classmethod
    def _effect(cls, v: str) -> str:
        if v not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ValueError("must be NoSchedule, PreferNoSchedule or NoExecute")
        return v


class GpuSpec(_Strict):
    count: int = Field(1, ge=1)
    type: str = "nvidia-tesla-t4"


class FailSpec(_Strict):
    stockout_after: int | None = Field(None, ge=0)
    error_rate: float = Field(0.0, ge=0.0, le=1.0)


class SimGroupSpec(_Strict):
    """One simulated node group: its bounds, machine shape, price and failure injection."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    min_size: int = Field(0, ge=0)
    max_size: int = Field(10, ge=0)
    initial_size: int = Field(0, ge=0)
    instance_type: str = ""
    capacity: dict[str, str] = Field(default_factory=lambda: {"cpu": "4", "memory": "16Gi"})
    reserved: dict[str, str] = Field(default_factory=dict)
    pods: int = Field(110, ge=1)
    gpu: GpuSpec | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    region: str = "sim-region-1"
    zone: str = "sim-region-1a"
    price_per_hour: float | None = Field(None, ge=0)
    options: dict[str, float | bool] = Field(default_factory=dict)
    fail: FailSpec = Field(default_factory=FailSpec)

    @field_validator("capacity", "reserved")
    @classmethod
    def _quantities(cls, v: dict[str, str]) -> dict[str, str]:
        from cloudprovider_grpc.k8s.quantity import parse_quantity

        for name, q in v.items():
            try:
                parse_quantity(str(q))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return {k: str(q) for k, q in v.items()}

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, float | bool]) -> dict[str, float | bool]:
        unknown = set(v) - _OPTION_FIELDS
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}; known: {sorted(_OPTION_FIELDS)}")
        return v

    @model_validator(mode="after")
    def _bounds(self) -> SimGroupSpec:
        if self.min_size > self.max_size:
            raise ValueError(f"min_size {self.min_size} is above max_size {self.max_size}")
        if self.initial_size > self.max_size:
            raise ValueError(f"initial_size {self.initial_size} is above max_size {self.max_size}")
        return self


class SimOptions(_Strict):
    """The `sim:` section of the config file.

    `shape` picks which machinery serves the cloud: `machines` (our server owns each group's size and
    creates machines one by one, like Cherry Servers) or `pools` (the cloud owns a desired size per
    group and creates and deletes instances itself, like Vultr VKE, Exoscale and AliCloud ESS; a size
    lowered below the group's count deletes random instances, as VKE does)."""

    shape: Literal["machines", "pools"] = "machines"
    provisioning_delay: float = Field(30.0, ge=0)
    deletion_delay: float = Field(5.0, ge=0)
    seed: int = 0
    groups: list[SimGroupSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> SimOptions:
        seen: set[str] = set()
        for g in self.groups:
            if g.id in seen:
                raise ValueError(f"node group {g.id!r} is defined twice")
            seen.add(g.id)
        return self


DEMO_GROUPS: list[dict[str, object]] = [
    {
        "id": "general",
        "min_size": 1,
        "max_size": 10,
        "initial_size": 1,
        "instance_type": "sim-4x16",
        "capacity": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi"},
        "reserved": {"cpu": "100m", "memory": "512Mi"},
        "price_per_hour": 0.20,
    },
    {
        "id": "highmem",
        "min_size": 0,
        "max_size": 5,
        "instance_type": "sim-8x64",
        "capacity": {"cpu": "8", "memory": "64Gi", "ephemeral-storage": "100Gi"},
        "reserved": {"cpu": "100m", "memory": "1Gi"},
        "price_per_hour": 0.50,
    },
    {
        "id": "gpu",
        "min_size": 0,
        "max_size": 3,
        "instance_type": "sim-8x32-t4",
        "capacity": {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "200Gi"},
        "reserved": {"cpu": "100m", "memory": "1Gi"},
        "gpu": {"count": 1, "type": "nvidia-tesla-t4"},
        "taints": [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}],
        "price_per_hour": 2.50,
        # GPU machines install their drivers before they turn Ready: a longer startup window
        # (served to CA 1.37 and later, which carry it)
        "options": {
            "scale_down_unneeded_time": 300.0,
            "scale_down_utilization_threshold": 0.3,
            "max_node_startup_time": 1200.0,
        },
    },
]


@dataclass
class SimMachine:
    id: str
    group: str
    name: str
    token: str
    created_at: float
    deleted_at: float | None = None
    #: what the last listing returned for it, handed out again while its state is the same (a
    #: simulated hour of 5,000 nodes lists every machine on each of 361 refreshes)
    listed: Machine | None = field(default=None, repr=False, compare=False)


class SimCloud:
    """The simulated cloud's state; thread-safe, inspectable by tests."""

    def __init__(self, options: SimOptions, clock: Callable[[], float] | None = None) -> None:
        self.options = options
        self.clock = clock or time.monotonic
        self.groups = {g.id: g for g in options.groups}
        self._lock = threading.Lock()
        self._rng = random.Random(options.seed)
        self._counters = dict.fromkeys(self.groups, 0)
        self.machines: dict[str, SimMachine] = {}
        self.calls: dict[str, int] = {"list": 0, "create": 0, "delete": 0, "set_size": 0, "remove": 0}
        # pool mode: the cloud's desired size per group and its last scaling failure
        self.desired: dict[str, int] = {g.id: g.initial_size for g in options.groups}
        self.failures: dict[str, InstanceError | None] = dict.fromkeys(self.groups)
        booted = self.clock() - options.provisioning_delay
        for g in options.groups:
            for _ in range(g.initial_size):
                self._add(g.id, "", booted)

    def _add(self, group: str, token: str, at: float) -> SimMachine:
        n = self._counters[group]
        self._counters[group] = n + 1
        m = SimMachine(f"sim://{group}/{n}", group, f"{group}-{n}", token, at)
        self.machines[m.id] = m
        return m

    def state_of(self, m: SimMachine, now: float) -> InstanceState | None:
        """None once the machine has finished terminating."""
        if m.deleted_at is not None:
            return None if now >= m.deleted_at + self.options.deletion_delay else InstanceState.DELETING
        if now < m.created_at + self.options.provisioning_delay:
            return InstanceState.CREATING
        return InstanceState.RUNNING

    def list_machines(self) -> list[Machine]:
        now = self.clock()
        # `state_of` inlined: every machine is listed on every Refresh (5,000-6,500 of them, 361
        # times in a simulated hour of the largest cluster)
        provisioning, deletion = self.options.provisioning_delay, self.options.deletion_delay
        running, creating, deleting = InstanceState.RUNNING, InstanceState.CREATING, InstanceState.DELETING
        with self._lock:
            self.calls["list"] += 1
            out = []
            gone = []
            for m in self.machines.values():
                deleted_at = m.deleted_at
                if deleted_at is not None:
                    if now >= deleted_at + deletion:
                        gone.append(m.id)
                        continue
                    st = deleting
                elif now < m.created_at + provisioning:
                    st = creating
                else:
                    st = running
                listed = m.listed
                if listed is None or listed.state is not st:
                    listed = m.listed = Machine(m.id, m.group, st, m.name, m.token)
                out.append(listed)
            for mid in gone:
                del self.machines[mid]
            return out

    def create(self, group: str, token: str) -> Machine:
        with self._lock:
            self.calls["create"] += 1
            spec = self.groups[group]
            alive = sum(1 for m in self.machines.values() if m.group == group and m.deleted_at is None)
            if spec.fail.stockout_after is not None and alive >= spec.fail.stockout_after:
                raise CloudError(
                    f"no capacity left for {spec.instance_type or group} in {spec.zone}",
                    error_class=ErrorClass.OUT_OF_RESOURCES,
                    code="STOCKOUT",
                )
            if spec.fail.error_rate and self._rng.random() < spec.fail.error_rate:
                raise CloudError("simulated provisioning error", code="SIMULATED_ERROR")
            m = self._add(group, token, self.clock())
            return Machine(m.id, m.group, InstanceState.CREATING, m.name, m.token)

    # ---- pool mode: the cloud owns the desired size and converges on it itself ----
    def _alive(self, group: str) -> list[SimMachine]:
        return [m for m in self.machines.values() if m.group == group and m.deleted_at is None]

    def _converge(self, group: str, now: float, alive: list[SimMachine] | None = None) -> None:
        """Create or delete instances until the group holds its desired size. Creation honours the
        group's failure injection; a failure is remembered as the pool's scaling failure until the
        group reaches its size. A lower size deletes random instances (VKE's behaviour)."""
        spec, want = self.groups[group], self.desired[group]
        if alive is None:
            alive = self._alive(group)
        while len(alive) > want:
            victim = alive.pop(self._rng.randrange(len(alive)))
            victim.deleted_at = now
        failure: InstanceError | None = None
        while len(alive) < want:
            if spec.fail.stockout_after is not None and len(alive) >= spec.fail.stockout_after:
                failure = InstanceError(
                    "STOCKOUT",
                    f"no capacity left for {spec.instance_type or group} in {spec.zone}",
                    ErrorClass.OUT_OF_RESOURCES,
                )
                break
            if spec.fail.error_rate and self._rng.random() < spec.fail.error_rate:
                failure = InstanceError("SIMULATED_ERROR", "simulated provisioning error")
                break
            alive.append(self._add(group, "", now))
        self.failures[group] = failure

    def list_pools(self) -> dict[str, tuple[int, list[Machine], InstanceError | None]]:
        """Per group: desired size, members, last scaling failure (one call, like a cluster listing)."""
        now = self.clock()
        with self._lock:
            # one pass over the machines: collecting each group's alive ones per group was
            # O(groups x machines), 0.6 s per listing at 1,000 groups
            alive: dict[str, list[SimMachine]] = {g: [] for g in self.groups}
            for sm in self.machines.values():
                if sm.deleted_at is None and sm.group in alive:
                    alive[sm.group].append(sm)
            for group in self.groups:
                self._converge(group, now, alive[group])
        members: dict[str, list[Machine]] = {g: [] for g in self.groups}
        for m in self.list_machines():  # one pass: filtering per group was O(groups x machines)
            members.setdefault(m.group, []).append(m)
        with self._lock:
            return {g: (self.desired[g], members[g], self.failures[g]) for g in self.groups}

    def set_size(self, group: str, size: int) -> None:
        with self._lock:
            self.calls["set_size"] += 1
            self.desired[group] = size
            self._converge(group, self.clock())

    def remove(self, group: str, machine_ids: Sequence[str]) -> None:
        """Delete exactly these instances and lower the desired size by the number that existed."""
        with self._lock:
            self.calls["remove"] += 1
            now = self.clock()
            for mid in machine_ids:
                m = self.machines.get(mid)
                if m is not None and m.group == group and m.deleted_at is None:
                    m.deleted_at = now
                    self.desired[group] = max(0, self.desired[group] - 1)

    def delete(self, machine_id: str) -> None:
        with self._lock:
            self.calls["delete"] += 1
            m = self.machines.get(machine_id)
            if m is None:
                raise MachineGone(f"machine {machine_id} not found")
            if m.deleted_at is None:
                m.deleted_at = self.clock()


class _SimReadSide(DriverBase):
    """What both sim drivers say about groups, templates and prices."""

    name = "sim"
    id_prefix = "sim://"
    gpu_label = GPU_LABEL

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = cloud
        self._templates = {g.id: _template(g) for g in cloud.options.groups}

    def groups(self) -> list[GroupConfig]:
        return self.group_configs()

    def group_configs(self) -> list[GroupConfig]:
        """The configured groups (the pool listing carries them too)."""
        return [
            GroupConfig(
                g.id,
                g.min_size,
                g.max_size,
                debug=f"sim group {g.id} ({g.instance_type or 'custom'}) min={g.min_size} max={g.max_size}",
                options=dict(g.options),
            )
            for g in self.cloud.options.groups
        ]

    def template(self, group: str) -> NodeTemplate | None:
        return self._templates.get(group)

    def hourly_price(self, group: str) -> float | None:
        spec = self.cloud.groups.get(group)
        return spec.price_per_hour if spec else None

    def gpu_types(self) -> list[str]:
        return sorted({g.gpu.type for g in self.cloud.options.groups if g.gpu})


class SimDriver(_SimReadSide, MachineDriver):
    """The sim cloud in machine mode: our server creates machines one by one."""

    def list_machines(self) -> list[Machine]:
        return self.cloud.list_machines()

    def create_machine(self, group: str, token: str) -> Machine:
        return self.cloud.create(group, token)

    def delete_machine(self, machine: Machine) -> None:
        self.cloud.delete(machine.id)


class SimPoolDriver(_SimReadSide, PoolDriver):
    """The sim cloud in pool mode: the cloud owns each group's desired size."""

    def list_pools(self) -> list[Pool]:
        configs = {c.id: c for c in self.group_configs()}
        return [
            Pool(configs[gid], desired, tuple(machines), failure)
            for gid, (desired, machines, failure) in self.cloud.list_pools().items()
        ]

    def set_size(self, group: str, size: int) -> None:
        self.cloud.set_size(group, size)

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        self.cloud.remove(group, [m.id for m in machines])
        return RemoveOutcome()


def _template(g: SimGroupSpec) -> NodeTemplate:
    capacity = dict(g.capacity)
    labels = {"cloudprovider-grpc.io/node-group": g.id, **g.labels}
    if g.gpu:
        capacity[GPU_RESOURCE] = str(g.gpu.count)
        labels[GPU_LABEL] = g.gpu.type
    return NodeTemplate(
        capacity=capacity,
        pods=g.pods,
        reserved=dict(g.reserved),
        labels=labels,
        taints=tuple(Taint(t.key, t.value, t.effect) for t in g.taints),
        instance_type=g.instance_type,
        region=g.region,
        zone=g.zone,
    )
