"""The AliCloud emulator's core: the cloud's state (scaling groups, configurations, instances,
activities, keys), its seeding, inspection and persistence, the state machines on the clock and the
JSON shapes of each object. How a request reaches it (routing, signatures, errors) is in rpc.py."""

from __future__ import annotations

import collections
import copy
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cloudprovider_grpc.core.clock import Clock
from cloudprovider_grpc.emulators import EmulatorServer, FaultPlan
from cloudprovider_grpc.emulators.alicloud import seed
from cloudprovider_grpc.emulators.alicloud.acs import (
    NONCES_KEPT,
    AccessKey,
    iso_time,
    minute_time,
)
from cloudprovider_grpc.emulators.server import REQUEST_LOG_SIZE


class AliCloudCore(EmulatorServer):
    """The emulator's state, seeding and inspection, persistence, the clock and the JSON shapes; the
    request side is in rpc.py, the actions in ess.py and services.py, put together in emulator.py."""

    name = "alicloud"
    prefix = "/"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        region: str = "cn-hangzhou",
        access_keys: Mapping[str, str] | None = None,
        oidc_tokens: Iterable[str] = (),
        role_arns: Iterable[str] = (),
        metadata_role: str = "",
        groups: Iterable[Mapping[str, Any]] = (),
        configurations: Iterable[Mapping[str, Any]] = (),
        instance_types: list[dict[str, Any]] | None = None,
        stock: Mapping[str, int] | None = None,
        pending_seconds: float = 5.0,
        removing_seconds: float = 3.0,
        activity_seconds: float = 1.0,
        sts_duration: int = 3600,
        signature_versions: Iterable[str] = ("v1", "v3"),
        clock: Clock | Callable[[], float] | None = None,
        faults: FaultPlan | None = None,
        rate_limit_per_s: float | None = None,
        state_file: Path | None = None,
        id_seed: int = 0,
    ) -> None:
        super().__init__(
            host, port, clock=clock, faults=faults, rate_limit_per_s=rate_limit_per_s, state_file=state_file
        )
        #: instance and activity ids come from a seeded generator, as the other emulators' do, so a
        #: simulation on this emulator names its nodes the same way run after run
        self._rng = random.Random(id_seed)
        self.region = region
        self.keys: dict[str, AccessKey] = {k: AccessKey(v) for k, v in (access_keys or {}).items()}
        self.oidc_tokens: set[str] = set(oidc_tokens)
        self.role_arns: set[str] = set(role_arns)
        self.metadata_role = metadata_role
        self.instance_types = copy.deepcopy(instance_types or seed.INSTANCE_TYPES)
        self.stock: dict[str, int] = dict(stock if stock is not None else {"*": 1000})
        self.pending_seconds = pending_seconds
        self.removing_seconds = removing_seconds
        self.activity_seconds = activity_seconds
        self.sts_duration = sts_duration
        self.signature_versions = frozenset(signature_versions)
        self.groups: dict[str, dict[str, Any]] = {}
        self.configurations: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, dict[str, Any]] = {}
        self.activities: dict[str, dict[str, Any]] = {}
        #: group id -> outcomes for its next scale-out activities: (StatusCode, ErrorCode, ErrorMessage)
        self.next_outcomes: dict[str, list[tuple[str, str, str]]] = {}
        #: actions the caller's RAM policy does not allow (403 Forbidden.Unauthorized)
        self.denied_actions: set[str] = set()
        #: scaling groups the caller's RAM policy denies (a Deny statement on the resource
        #: `acs:ess:*:*:scalinggroup/<id>`, RAM's resource-level authorisation): any action naming one
        #: in `ScalingGroupId` answers 403 Forbidden.Unauthorized. List calls over many groups
        #: (DescribeScalingGroups) stay allowed, as a policy granting `ess:Describe*` on `*` makes them
        #: (our reconstruction: how ESS filters a list call under such a Deny is not documented)
        self.denied_groups: set[str] = set()
        #: instance id -> (Code, Message) RemoveInstances answers for it (injected refusals)
        self.remove_refusals: dict[str, tuple[str, str]] = {}
        self._nonces: dict[str, float] = {}
        self._nonces_kept = NONCES_KEPT
        self._tokens: dict[str, dict[str, Any]] = {}
        self._seq = 0
        # bounded like the base's request log (a long-running `--emulate` server must not grow)
        self._actions: collections.deque[str] = collections.deque(maxlen=REQUEST_LOG_SIZE)
        #: launch template id -> its versions ({VersionNumber, DefaultVersion, LaunchTemplateData})
        self.launch_templates: dict[str, list[dict[str, Any]]] = {}
        for g in groups:
            self.add_group(g)
        for c in configurations:
            self.add_configuration(c)

        self._add_routes()

    def _add_routes(self) -> None:
        """The routes, added by the request side (rpc.py) and the assembled emulator."""

    # ------------------------------------------------------------------ seeding and inspection
    def add_group(self, group: Mapping[str, Any], *, instances: int | None = None) -> dict[str, Any]:
        """A scaling group (fields as DescribeScalingGroups answers; `Zones` lists where its
        vSwitches are). `instances` InService instances are created at once (default: its
        DesiredCapacity, or MinSize)."""
        with self.lock:
            g = {
                "RegionId": self.region,
                "LifecycleState": "Active",
                "EnableDesiredCapacity": True,
                "MinSize": 0,
                "MaxSize": 10,
                "ScalingPolicy": "release",
                "RemovalPolicies": ["OldestScalingConfiguration", "OldestInstance"],
                "MultiAZPolicy": "PRIORITY",
                "GroupType": "ECS",
                "Zones": list(seed.ZONES[:1]),
                "VSwitchIds": [],
                "Tags": [],
                "CreationTime": minute_time(self.clock()),
                **copy.deepcopy(dict(group)),
            }
            g.setdefault("ScalingGroupName", g["ScalingGroupId"])
            count = instances if instances is not None else int(g.get("DesiredCapacity") or g["MinSize"])
            if not g["EnableDesiredCapacity"]:
                g.pop("DesiredCapacity", None)
            else:
                g["DesiredCapacity"] = int(g.get("DesiredCapacity", count))
            self.groups[g["ScalingGroupId"]] = g
            for _ in range(count):
                self._new_instance(g, "InService", activity="")
            return g

    def add_configuration(self, config: Mapping[str, Any]) -> None:
        with self.lock:
            c = {
                "LifecycleState": "Active",
                "Tags": [],
                "CreationTime": minute_time(self.clock()),
                **copy.deepcopy(dict(config)),
            }
            c.setdefault("InstanceTypes", [c["InstanceType"]] if c.get("InstanceType") else [])
            self.configurations[c["ScalingConfigurationId"]] = c

    def add_launch_template(self, template_id: str, *datas: Mapping[str, Any], default: int = 1) -> None:
        """A launch template whose versions 1..n hold these `LaunchTemplateData`s."""
        with self.lock:
            self.launch_templates[template_id] = [
                {
                    "LaunchTemplateId": template_id,
                    "LaunchTemplateName": template_id,
                    "VersionNumber": n,
                    "DefaultVersion": n == default,
                    "LaunchTemplateData": copy.deepcopy(dict(data)),
                }
                for n, data in enumerate(datas, 1)
            ]

    def fail_next_scale_out(
        self,
        group_id: str,
        status: str = "Failed",
        code: str = "OperationDenied.NoStock",
        message: str = "The resource is out of stock in the specified zone. "
        "Please try other types, or choose other regions and zones.",
    ) -> None:
        """The group's next scale-out activity ends `status` with this error (no instances are
        created, or for `Warning` half of them)."""
        with self.lock:
            self.next_outcomes.setdefault(group_id, []).append((status, code, message))

    def set_lifecycle(self, instance_id: str, state: str) -> None:
        """Put an instance in a lifecycle state (Protected, Standby...); `Removing` ends with the
        instance gone after `removing_seconds`, `Pending` with it in service after `pending_seconds`."""
        with self.lock:
            inst = self.instances[instance_id]
            inst["LifecycleState"] = state
            now = self.clock()
            inst["_gone_at"] = now + self.removing_seconds
            inst["_ready_at"] = now + self.pending_seconds

    def expire_temporary_keys(self) -> None:
        """Every temporary key issued so far expires now (the server then refuses it)."""
        with self.lock:
            now = time.time()
            for key in self.keys.values():
                if key.token:
                    key.expires_at = now - 1

    def group_instances(self, group_id: str) -> list[dict[str, Any]]:
        with self.lock:
            self._tick()
            return [copy.deepcopy(i) for i in self.instances.values() if i["ScalingGroupId"] == group_id]

    def group_record(self, group_id: str) -> dict[str, Any]:
        with self.lock:
            self._tick()
            return self._group_json(self.groups[group_id], "2022-02-22")

    def activity_records(self, group_id: str) -> list[dict[str, Any]]:
        with self.lock:
            self._tick()
            return [self._activity_json(a) for a in self._activities_of(group_id)]

    def actions(self) -> list[str]:
        """The Action (or metadata path) of every request since the last `clear_log`, in order,
        whatever the signature version put it in (benchmarks and tests count them)."""
        with self.lock:
            return list(self._actions)

    def clear_log(self) -> None:
        with self.lock:
            super().clear_log()
            self._actions.clear()

    def keep_history(self, requests: int) -> None:
        """The base's log, the actions and the signature nonces: the newest `requests` of each."""
        with self.lock:
            super().keep_history(requests)
            self._actions = collections.deque(self._actions, maxlen=requests)
            self._nonces_kept = max(2, requests)

    def _note(self, action: str) -> None:
        # interned: ten thousand "DescribeScalingInstances" cost one string, not ten thousand copies
        self._actions.append(sys.intern(action))

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "configurations": self.configurations,
            "instances": self.instances,
            "activities": self.activities,
            "stock": self.stock,
            "keys": {k: [v.secret, v.token, v.expires_at] for k, v in self.keys.items()},
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        self.groups.update(data.get("groups", {}))
        self.configurations.update(data.get("configurations", {}))
        self.instances = dict(data.get("instances", {}))
        self.activities = dict(data.get("activities", {}))
        self.stock.update(data.get("stock", {}))
        for k, (secret, token, expires) in data.get("keys", {}).items():
            self.keys.setdefault(k, AccessKey(secret, token, expires))

    # ------------------------------------------------------------------ the clock
    def _tick(self) -> None:
        """Advance every state machine to the clock's now (called under the lock)."""
        now = self.clock()
        for iid, inst in list(self.instances.items()):
            state = inst["LifecycleState"]
            if state in ("Pending", "Pending:Wait") and now >= inst["_ready_at"]:
                inst["LifecycleState"] = "InService"
            elif state in ("Removing", "Removing:Wait") and now >= inst["_gone_at"]:
                del self.instances[iid]
        for act in self.activities.values():
            if act["StatusCode"] == "InProgress" and now >= act["_end_at"]:
                status, code, message = act["_outcome"]
                act["StatusCode"] = status
                act["Progress"] = 100
                act["EndTime"] = minute_time(act["_end_at"])
                act["ErrorCode"], act["ErrorMessage"] = code, message
                act["StatusMessage"] = message or f'"{act["Description"]}" succeeded.'

    def _request_id(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4)).upper()

    def _rand(self, n: int) -> str:
        return "".join(self._rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))

    def _next_id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}-{self.region[:2]}{self._rand(17)}{self._seq % 10}"

    def _new_instance(self, g: Mapping[str, Any], state: str, activity: str) -> dict[str, Any]:
        now = self.clock()
        zones = g.get("Zones") or list(seed.ZONES[:1])
        live = [i for i in self.instances.values() if i["ScalingGroupId"] == g["ScalingGroupId"]]
        # spread over the group's zones like the "balance" multi-zone policy
        zone = min(zones, key=lambda z: (sum(1 for i in live if i["ZoneId"] == z), zones.index(z)))
        config = self.configurations.get(g.get("ActiveScalingConfigurationId") or "", {})
        inst = {
            "InstanceId": f"i-{self.region[3:5] or 'bp'}{self._rand(18)}",
            "ScalingGroupId": g["ScalingGroupId"],
            "ScalingConfigurationId": g.get("ActiveScalingConfigurationId", ""),
            "LifecycleState": state,
            "HealthStatus": "Healthy",
            "CreationType": "AutoCreated",
            "Entrusted": True,
            "ZoneId": zone,
            "CreationTime": minute_time(now),
            "CreatedTime": iso_time(now),
            "ScalingActivityId": activity,
            "WeightedCapacity": 1,
            "WarmupState": "NoNeedWarmup",
            "InstanceType": config.get("InstanceType", ""),
            "_created": now,
            "_ready_at": now + self.pending_seconds,
            "_gone_at": 0.0,
        }
        self.instances[inst["InstanceId"]] = inst
        return inst

    # ------------------------------------------------------------------ shapes
    def _live(self, group_id: str) -> list[dict[str, Any]]:
        return [i for i in self.instances.values() if i["ScalingGroupId"] == group_id]

    def _group_json(self, g: Mapping[str, Any], version: str) -> dict[str, Any]:
        insts = self._live(g["ScalingGroupId"])

        def count(*states: str) -> int:
            return sum(1 for i in insts if i["LifecycleState"] in states)

        out = {k: copy.deepcopy(v) for k, v in g.items() if k != "Zones"}
        out.update(
            {
                "TotalCapacity": len(insts),
                "TotalInstanceCount": len(insts),
                "ActiveCapacity": count("InService"),
                "PendingCapacity": count("Pending"),
                "PendingWaitCapacity": count("Pending:Wait"),
                "RemovingCapacity": count("Removing"),
                "RemovingWaitCapacity": count("Removing:Wait"),
                "ProtectedCapacity": count("Protected"),
                "StandbyCapacity": count("Standby"),
                "StoppedCapacity": count("Stopped"),
                "InitCapacity": 0,
                "SpotCapacity": 0,
            }
        )
        if version == "2014-08-28":
            out["VSwitchIds"] = {"VSwitchId": out.get("VSwitchIds", [])}
            out["RemovalPolicies"] = {"RemovalPolicy": out.get("RemovalPolicies", [])}
            out.pop("Tags", None)
        return out

    def _instance_json(self, inst: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in inst.items() if not k.startswith("_") and k != "InstanceType"}

    def _activity_json(self, act: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in act.items() if not k.startswith("_")}

    def _activities_of(self, group_id: str) -> list[dict[str, Any]]:
        acts = [a for a in self.activities.values() if a["ScalingGroupId"] == group_id]
        return sorted(acts, key=lambda a: a["_seq"], reverse=True)
