"""The AliCloud emulator's ESS actions: describing scaling groups, instances, configurations and
activities, ScaleWithAdjustment and RemoveInstances."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from cloudprovider_grpc.emulators.alicloud.acs import (
    ACTIVITIES_KEPT,
    CLIENT_TOKENS_KEPT,
    REMOVABLE,
    AcsError,
    fail,
    flag,
    minute_time,
    missing,
)
from cloudprovider_grpc.emulators.alicloud.rpc import AcsRpc


class EssActions(AcsRpc):
    """ESS reads and changes."""

    # ------------------------------------------------------------------ ESS reads
    def _describe_groups(self, params: dict[str, str], version: str) -> dict[str, Any]:
        ids = self._numbered(params, "ScalingGroupIds", "ScalingGroupId")
        names = self._numbered(params, "ScalingGroupNames", "ScalingGroupName")
        if params.get("ScalingGroupName"):
            names.append(params["ScalingGroupName"])
        if len(ids) > 20 or len(names) > 20:
            raise AcsError(400, "InvalidParameter", "At most 20 scaling group ids or names may be given.")
        number, size = self._page(params, 10, 50)
        groups = sorted(self.groups.values(), key=lambda g: g["ScalingGroupId"])
        wanted_tags = self._tag_filter(params)
        if wanted_tags:
            # [reconstruction] every given tag must be on the group; a tag without Value matches any value
            groups = [g for g in groups if self._has_tags(g, wanted_tags)]
        if ids or names:
            # ids and names of inactive groups are left out without an error (vendor doc)
            groups = [
                g
                for g in groups
                if (g["ScalingGroupId"] in ids or g["ScalingGroupName"] in names)
                and g["LifecycleState"] == "Active"
            ]
        page = groups[(number - 1) * size : number * size]
        body = self._wrap(
            version, "ScalingGroups", "ScalingGroup", [self._group_json(g, version) for g in page]
        )
        body.update({"TotalCount": len(groups), "PageNumber": number, "PageSize": size})
        return body

    @staticmethod
    def _tag_filter(params: Mapping[str, str]) -> dict[str, str | None]:
        tags: dict[str, str | None] = {}
        for key, value in params.items():
            base, _, field_name = key.rpartition(".")
            if base.startswith("Tags.") and field_name == "Key":
                tags[value] = params.get(f"{base}.Value")
        return tags

    @staticmethod
    def _has_tags(group: Mapping[str, Any], wanted: Mapping[str, str | None]) -> bool:
        have = {str(t.get("TagKey")): str(t.get("TagValue") or "") for t in group.get("Tags") or []}
        return all(k in have and (v is None or have[k] == v) for k, v in wanted.items())

    def _describe_instances(self, params: dict[str, str], version: str) -> dict[str, Any]:
        gid = params.get("ScalingGroupId", "")
        states = self._numbered(params, "LifecycleStates")
        if params.get("LifecycleState"):
            states.append(params["LifecycleState"])
        ids = self._numbered(params, "InstanceIds", "InstanceId")
        number, size = self._page(params, 10, 100)
        insts = sorted(self.instances.values(), key=lambda i: (i["_created"], i["InstanceId"]))
        insts = [
            i
            for i in insts
            if (not gid or i["ScalingGroupId"] == gid)
            and (not states or i["LifecycleState"] in states)
            and (not ids or i["InstanceId"] in ids)
            and (not params.get("CreationType") or i["CreationType"] == params["CreationType"])
        ]
        page = insts[(number - 1) * size : number * size]
        body = self._wrap(
            version, "ScalingInstances", "ScalingInstance", [self._instance_json(i) for i in page]
        )
        body.update({"TotalCount": len(insts), "PageNumber": number, "PageSize": size})
        return body

    def _describe_configurations(self, params: dict[str, str], version: str) -> dict[str, Any]:
        gid = params.get("ScalingGroupId", "")
        ids = self._numbered(params, "ScalingConfigurationIds", "ScalingConfigurationId")
        number, size = self._page(params, 10, 50)
        configs = [
            c
            for c in sorted(self.configurations.values(), key=lambda c: c["ScalingConfigurationId"])
            if (not gid or c["ScalingGroupId"] == gid) and (not ids or c["ScalingConfigurationId"] in ids)
        ]
        page = [copy.deepcopy(c) for c in configs[(number - 1) * size : number * size]]
        if version == "2014-08-28":
            for c in page:
                c["Tags"] = {"Tag": c.get("Tags", [])}
                c["InstanceTypes"] = {"InstanceType": c.get("InstanceTypes", [])}
        body = self._wrap(version, "ScalingConfigurations", "ScalingConfiguration", page)
        body.update({"TotalCount": len(configs), "PageNumber": number, "PageSize": size})
        return body

    def _describe_activities(self, params: dict[str, str], version: str) -> dict[str, Any]:
        g = self._group(params)
        ids = self._numbered(params, "ScalingActivityIds", "ScalingActivityId")
        number, size = self._page(params, 10, 50)
        acts = [
            a
            for a in self._activities_of(g["ScalingGroupId"])
            if (not ids or a["ScalingActivityId"] in ids)
            and (not params.get("StatusCode") or a["StatusCode"] == params["StatusCode"])
        ]
        page = [self._activity_json(a) for a in acts[(number - 1) * size : number * size]]
        if version == "2014-08-28":
            # the 2014 API wraps these lists too, as alibaba-cloud-sdk-go's ess.ScalingActivity
            # models them ({"CreatedInstances": {"CreatedInstance": [...]}}); 2022-02-22 does not
            for a in page:
                for name, inner in (
                    ("CreatedInstances", "CreatedInstance"),
                    ("DestroyedInstances", "DestroyedInstance"),
                ):
                    a[name] = {inner: a.get(name, [])}
        body = self._wrap(version, "ScalingActivities", "ScalingActivity", page)
        body.update({"TotalCount": len(acts), "PageNumber": number, "PageSize": size})
        return body

    # ------------------------------------------------------------------ ESS changes
    def _client_token(self, params: Mapping[str, str], action: str) -> tuple[str, dict[str, Any] | None]:
        token = params.get("ClientToken", "")
        if not token:
            return "", None
        if len(token) > 64 or not token.isascii():
            raise AcsError(400, "InvalidParameter", "ClientToken must be at most 64 ASCII characters.")
        key = f"{action}|{params.get('ScalingGroupId', '')}|{token}"
        done = self._tokens.get(key)
        return key, copy.deepcopy(done) if done is not None else None

    def _start_activity(
        self, g: dict[str, Any], *, kind: str, cause: str, description: str, metadata: str, total: int
    ) -> dict[str, Any]:
        now = self.clock()
        self._seq += 1
        act = {
            "ScalingActivityId": self._next_id("asa"),
            "ScalingGroupId": g["ScalingGroupId"],
            "StatusCode": "InProgress",
            "StatusMessage": "",
            "Progress": 0,
            "Cause": cause,
            "Description": description,
            "StartTime": minute_time(now),
            "TotalCapacity": str(total),
            "ActivityMetadata": metadata,
            "ErrorCode": "",
            "ErrorMessage": "",
            "CreatedCapacity": 0,
            "DestroyedCapacity": 0,
            "CreatedInstances": [],
            "DestroyedInstances": [],
            "ScalingInstanceNumber": 0,
            "_seq": self._seq,
            "_kind": kind,
            "_end_at": now + self.activity_seconds,
            "_outcome": ("Successful", "", ""),
        }
        self.activities[act["ScalingActivityId"]] = act
        self._forget_old_activities(g["ScalingGroupId"])
        return act

    def _forget_old_activities(self, group_id: str) -> None:
        finished = [a for a in self._activities_of(group_id) if a["StatusCode"] != "InProgress"]
        for old in finished[ACTIVITIES_KEPT:]:
            del self.activities[old["ScalingActivityId"]]

    def _remember_token(self, key: str, body: dict[str, Any]) -> None:
        self._tokens[key] = copy.deepcopy(body)
        while len(self._tokens) > CLIENT_TOKENS_KEPT:
            del self._tokens[next(iter(self._tokens))]  # the oldest (dicts keep insertion order)

    def _scale_out(self, g: dict[str, Any], act: dict[str, Any], n: int) -> None:
        queue = self.next_outcomes.get(g["ScalingGroupId"]) or []
        injected = queue.pop(0) if queue else None
        config = self.configurations.get(g.get("ActiveScalingConfigurationId") or "", {})
        itype = config.get("InstanceType", "")
        available = self.stock.get(itype, self.stock.get("*", n))
        make = min(n, available)
        outcome: tuple[str, str, str] = ("Successful", "", "")
        if injected is not None:
            outcome = injected
            make = 0 if injected[0] in ("Failed", "Rejected") else min(make, n // 2)
        elif make < n:
            outcome = (
                "Failed" if make == 0 else "Warning",
                "OperationDenied.NoStock",
                f"Fail to create Instance into scaling group(id:{g['ScalingGroupId']}) : "
                "The resource is out of "
                "stock in the specified zone. Please try other types, or choose other regions and zones.",
            )  # wording: a reconstruction of the vendor's stock-out message
        if itype in self.stock:
            self.stock[itype] -= make
        elif "*" in self.stock:
            self.stock["*"] -= make
        created = [self._new_instance(g, "Pending", act["ScalingActivityId"]) for _ in range(make)]
        act["CreatedInstances"] = [i["InstanceId"] for i in created]
        act["CreatedCapacity"] = act["ScalingInstanceNumber"] = make
        act["_outcome"] = outcome
        act["_end_at"] = self.clock() + max(self.activity_seconds, self.pending_seconds if make else 0.0)

    def _scale_in(self, act: dict[str, Any], victims: list[dict[str, Any]]) -> None:
        now = self.clock()
        for inst in victims:
            inst["LifecycleState"] = "Removing"
            inst["_gone_at"] = now + self.removing_seconds
        act["DestroyedInstances"] = [i["InstanceId"] for i in victims]
        act["DestroyedCapacity"] = act["ScalingInstanceNumber"] = len(victims)
        act["_end_at"] = now + max(self.activity_seconds, self.removing_seconds)

    def _busy(self, g: Mapping[str, Any]) -> bool:
        return any(a["StatusCode"] == "InProgress" for a in self._activities_of(g["ScalingGroupId"]))

    def _scale_with_adjustment(self, params: dict[str, str], version: str) -> dict[str, Any]:
        g = self._group(params)
        token_key, done = self._client_token(params, "ScaleWithAdjustment")
        if done is not None:
            return done
        kind = self._require(params, "AdjustmentType")
        try:
            value = int(self._require(params, "AdjustmentValue"))
        except ValueError:
            raise AcsError(400, "InvalidParameter", "AdjustmentValue must be an integer.") from None
        limits = {
            "TotalCapacity": (0, 2000),
            "QuantityChangeInCapacity": (-1000, 1000),
            "PercentChangeInCapacity": (-100, 10000),
        }
        if kind not in limits:
            raise AcsError(400, "InvalidParameter", f"The specified AdjustmentType {kind!r} is not valid.")
        lo, hi = limits[kind]
        if not lo <= value <= hi:
            raise AcsError(400, "InvalidParameter", f"AdjustmentValue must be {lo}..{hi} for {kind}.")
        if g["LifecycleState"] != "Active":
            raise fail("IncorrectScalingGroupStatus")
        desired_mode = bool(g.get("EnableDesiredCapacity"))
        if not desired_mode and self._busy(g):
            raise fail("ScalingActivityInProgress")
        live = [i for i in self._live(g["ScalingGroupId"]) if not i["LifecycleState"].startswith("Removing")]
        current = int(g["DesiredCapacity"]) if desired_mode else len(live)
        if kind == "TotalCapacity":
            target = value
        elif kind == "QuantityChangeInCapacity":
            target = current + value
        else:
            target = current + int(current * value / 100)
        target = max(int(g["MinSize"]), min(int(g["MaxSize"]), target))  # clamped (vendor doc)
        metadata = params.get("ActivityMetadata", "")
        if metadata:
            try:
                if not isinstance(json.loads(metadata), dict):
                    raise ValueError
            except ValueError:
                raise AcsError(400, "InvalidParameter", "ActivityMetadata must be a JSON object.") from None
        if desired_mode:
            g["DesiredCapacity"] = target
        body: dict[str, Any] = {}
        sync = flag(params.get("SyncActivity"), True)
        diff = target - len(live)
        if diff == 0 and desired_mode:
            body["ActivityType"] = "CapacityChange"
        else:
            act = self._start_activity(
                g,
                kind="out" if diff > 0 else "in",
                cause="A user requests to execute scaling rule, changing the Total Capacity "
                f"from {len(live)} to {target}.",
                description=f'{"Add" if diff > 0 else "Remove"} "{abs(diff)}" ECS instances',
                metadata=metadata,
                total=target,
            )
            if diff > 0:
                self._scale_out(g, act, diff)
            elif diff < 0:
                oldest = sorted(
                    (i for i in live if i["LifecycleState"] in REMOVABLE | {"Pending"}),
                    key=lambda i: i["_created"],
                )
                self._scale_in(act, oldest[:-diff])
            body["ScalingActivityId"] = act["ScalingActivityId"]
            body["ActivityType"] = "CapacityChange" if (desired_mode and not sync) else "ScalingActivity"
        if token_key:
            self._remember_token(token_key, body)
        return body

    def _remove_instances(self, params: dict[str, str], version: str) -> dict[str, Any]:
        g = self._group(params)
        token_key, done = self._client_token(params, "RemoveInstances")
        if done is not None:
            return done
        ids = self._numbered(params, "InstanceIds", "InstanceId")
        if not ids:
            raise missing("InstanceIds")
        if len(ids) > 20:
            raise AcsError(400, "InvalidParameter", "At most 20 instances can be removed in one call.")
        policy = params.get("RemovePolicy") or "release"
        if policy not in ("release", "recycle", "remove"):
            raise AcsError(
                400, "InvalidParameter", f"The specified RemovePolicy {policy!r} is not supported."
            )
        decrease = flag(params.get("DecreaseDesiredCapacity"), True)
        ignore = flag(params.get("IgnoreInvalidInstance"), False)
        if g["LifecycleState"] != "Active":
            raise fail("IncorrectScalingGroupStatus")
        desired_mode = bool(g.get("EnableDesiredCapacity"))
        if not desired_mode and self._busy(g):
            raise fail("ScalingActivityInProgress")
        valid: list[dict[str, Any]] = []
        ignored: list[dict[str, str]] = []
        for iid in dict.fromkeys(ids):
            inst = self.instances.get(iid)
            problem: tuple[int, str, str] | None = None
            if inst is None or inst["ScalingGroupId"] != g["ScalingGroupId"]:
                problem = (
                    404,
                    "InvalidInstanceId.NotFound",
                    f'The specified instance "{iid}" does not exist in the scaling group.',
                )
            elif iid in self.remove_refusals:
                problem = (400, *self.remove_refusals[iid])
            elif inst["LifecycleState"] not in REMOVABLE:
                # [reconstruction] the doc requires In Service instances; the code is ours
                problem = (
                    400,
                    "IncorrectInstanceStatus",
                    f'The current status "{inst["LifecycleState"]}" of instance "{iid}" '
                    "does not support this action.",
                )
            if problem is None:
                assert inst is not None
                valid.append(inst)
            elif ignore:
                ignored.append({"InstanceId": iid, "Code": problem[1], "Message": problem[2]})
            else:
                raise AcsError(*problem)
        live = [i for i in self._live(g["ScalingGroupId"]) if not i["LifecycleState"].startswith("Removing")]
        total = int(g["DesiredCapacity"]) if desired_mode else len(live)
        if valid and total - len(valid) < int(g["MinSize"]) and decrease:
            raise fail("IncorrectCapacity.MinSize")
        body: dict[str, Any] = {}
        if version == "2022-02-22":
            body["IgnoredInstances"] = ignored
        if valid:
            if desired_mode and decrease:
                g["DesiredCapacity"] = max(int(g["MinSize"]), int(g["DesiredCapacity"]) - len(valid))
            act = self._start_activity(
                g,
                kind="in",
                cause="A user removes instances from the scaling group.",
                description=f'Remove "{len(valid)}" ECS instances',
                metadata="",
                total=len(live) - len(valid),
            )
            self._scale_in(act, valid)
            if ignored:
                act["_outcome"] = ("Warning", ignored[0]["Code"], ignored[0]["Message"])
            body["ScalingActivityId"] = act["ScalingActivityId"]
        if token_key:
            self._remember_token(token_key, body)
        return body
