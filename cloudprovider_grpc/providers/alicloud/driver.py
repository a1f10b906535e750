"""AliCloud ESS scaling groups on the pool shape: ESS owns each group's desired capacity.

Per Refresh: one DescribeScalingGroups for up to 20 groups and one DescribeScalingInstances (100 a
page) per group; DescribeScalingActivities only for a group whose desired capacity is above its
instances (the only case where CA shows placeholders that a failed scale-out should explain).
Changes: ScaleWithAdjustment(TotalCapacity) for a new size, RemoveInstances (20 a call, lowering
the desired capacity, invalid instances reported one by one) for named nodes. Both return a scaling
activity the machinery polls with `poll`. Templates come from the active scaling configuration (or
the launch template overrides) and ECS DescribeInstanceTypes, cached for the catalogue TTL.

ProviderIDs are `<region>.<instance-id>`, as the Alibaba CCM sets them and the in-tree provider
parses them; `alicloud://<region>.<instance-id>` (also accepted by that CCM) is matched too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, InstanceError
from cloudprovider_grpc.k8s.template import NodeTemplate, Taint
from cloudprovider_grpc.providers.alicloud.client import REMOVE_BATCH, AliClient
from cloudprovider_grpc.providers.alicloud.config import AliConfig
from cloudprovider_grpc.providers.alicloud.errors import error_class
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import (
    GroupConfig,
    Machine,
    Operation,
    OperationState,
    OperationStatus,
    Pool,
    PoolDriver,
    RemoveOutcome,
)

log = logging.getLogger(__name__)

GPU_LABEL = "aliyun.accelerator/nvidia_name"
GPU_RESOURCE = "nvidia.com/gpu"
#: what the in-tree provider puts in ActivityMetadata (alicloud_auto_scaling.go); we use the same key
#: so activities started by either are recognised as CA's
ACTIVITY_METADATA = {"cluster-autoscaler/alicloud/managed": "true"}
#: AWS-style node-template tags (an extension; in-tree copies every tag as a label)
TEMPLATE_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/"
TEMPLATE_TAINT_TAG = "k8s.io/cluster-autoscaler/node-template/taint/"
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
#: instance listings in flight at once during a Refresh (the client's rate limit still applies)
LISTING_CONCURRENCY = 4

#: ESS LifecycleState -> what CA sees (ESS DescribeScalingInstances, vendor doc)
_STATES = {
    "Pending": InstanceState.CREATING,
    "Pending:Wait": InstanceState.CREATING,
    "InService": InstanceState.RUNNING,
    "Protected": InstanceState.RUNNING,
    "Standby": InstanceState.RUNNING,
    "Stopped": InstanceState.RUNNING,
    "Removing": InstanceState.DELETING,
    "Removing:Wait": InstanceState.DELETING,
}
_FAILED_ACTIVITY = frozenset({"Failed", "Rejected", "Warning"})
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_KEY_RE = re.compile(
    rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
)
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_NODE_NAME_RE = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+\.i-[a-z0-9]+$")


def lifecycle_state(state: str) -> InstanceState:
    return _STATES.get(state, InstanceState.RUNNING)


def gpu_label_value(spec: str) -> str:
    """`aliyun.accelerator/nvidia_name` from ECS `GPUSpec`: spaces become dashes ("NVIDIA T4" ->
    "NVIDIA-T4"). Inferred: ACK nodes carry the driver's product name with dashes ("Tesla-V100-
    SXM2-16GB"), which ECS does not publish; a scaling-configuration tag with this key wins."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.strip()).strip("-_.")
    return value[:63].rstrip("-_.")


def activity_error(activity: Mapping[str, Any]) -> InstanceError:
    code = str(activity.get("ErrorCode") or "") or f"ScalingActivity{activity.get('StatusCode', '')}"
    message = str(activity.get("ErrorMessage") or activity.get("StatusMessage") or "")
    what = f"scaling activity {activity.get('ScalingActivityId', '')} {activity.get('StatusCode', '')}"
    text = f"{what}: {message}"
    return InstanceError(code=code, message=" ".join(text.split())[:400], error_class=error_class(code))


def _ours(activity: Mapping[str, Any]) -> bool:
    try:
        meta = json.loads(str(activity.get("ActivityMetadata") or "{}"))
    except ValueError:
        return False
    return isinstance(meta, dict) and all(meta.get(k) == v for k, v in ACTIVITY_METADATA.items())


@dataclass
class _Shape:
    """What the catalogue knows of one group: its configuration, its instance type, and the zone of
    its first vSwitch (where ESS's default PRIORITY multi-zone policy puts new instances first)."""

    config: dict[str, Any] = field(default_factory=dict)
    instance_type: dict[str, Any] = field(default_factory=dict)
    zone: str = ""


class AliCloudDriver(PoolDriver):
    name = "alicloud"
    gpu_label = GPU_LABEL
    remove_lowers_size = True

    def __init__(self, config: AliConfig, client: AliClient) -> None:
        self.config = config
        self.client = client
        self.id_prefix = f"{config.region}." if config.region else ""
        self._lock = threading.Lock()
        #: the --nodes groups (bounds from the flag) and, with discovery, the groups found by tag
        self._static = {g.id: g for g in config.groups}
        self._groups = dict(self._static)
        #: from the last listing: group id -> its ESS record, and the zones its instances are in
        self._records: dict[str, dict[str, Any]] = {}
        self._zones: dict[str, Counter[str]] = {}
        self._shapes: dict[str, _Shape] = {}
        #: removal batch -> how many of its requests ESS has answered (see _remove_token)
        self._remove_attempts: dict[str, int] = {}
        #: vSwitch id -> zone (a vSwitch never changes zone, so this is never reloaded)
        self._vswitch_zones: dict[str, str] = {}
        self._pool_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"AliCloudDriver(groups={sorted(self._groups)}, client={self.client!r})"

    # ------------------------------------------------------------------ groups and listing
    def groups(self) -> list[GroupConfig]:
        with self._lock:
            return list(self._groups.values())

    def _region(self) -> str:
        region = self.client.region
        if not self.id_prefix:
            self.id_prefix = f"{region}."
        return region

    def _list_groups(self) -> dict[str, dict[str, Any]]:
        """ESS records of our groups: the --nodes ids, plus (with discovery) every group with the
        tags, whose bounds are its own MinSize/MaxSize unless --nodes names it. One call per 20
        static ids or per 50 discovered groups."""
        tags = self.config.discovery_tags
        records: dict[str, dict[str, Any]] = {}
        groups = dict(self._static)
        if tags:
            for r in self.client.discover_scaling_groups(tags):
                have = {str(t.get("TagKey")): str(t.get("TagValue") or "") for t in r.get("Tags") or []}
                gid = str(r.get("ScalingGroupId") or "")
                if not gid or not all(k in have and (not v or have[k] == v) for k, v in tags.items()):
                    continue  # the filter is ESS's; checked again so a looser answer adds nothing
                records[gid] = r
                if gid not in groups:
                    lo, hi = int(r.get("MinSize") or 0), int(r.get("MaxSize") or 0)
                    name = str(r.get("ScalingGroupName") or gid)
                    groups[gid] = GroupConfig(gid, lo, hi, debug=f"{gid} ({lo}:{hi}) discovered", name=name)
        missing = [gid for gid in self._static if gid not in records]
        if missing:
            records.update(
                (str(r.get("ScalingGroupId")), r) for r in self.client.describe_scaling_groups(missing)
            )
        with self._lock:
            self._groups = groups
        return records

    def list_pools(self) -> list[Pool]:
        region = self._region()
        records = self._list_groups()
        with self._lock:
            current = dict(self._groups)
        wanted = list(current)
        # one instance listing per group, several at a time: a Refresh over many groups must stay
        # within CA's deadline (each call is a round trip to the region's endpoint)
        listed = [gid for gid in wanted if gid in records]
        if len(listed) > 1:
            with self._pool_lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        LISTING_CONCURRENCY, thread_name_prefix="alicloud-list"
                    )
                results = list(self._executor.map(self._instances_of, listed))
        else:
            results = [self._instances_of(gid) for gid in listed]
        by_group = dict(zip(listed, results, strict=True))
        pools: list[Pool] = []
        for gid, group in current.items():
            record = records.get(gid)
            if record is None:
                err = CloudError(
                    f"alicloud: scaling group {gid} was not returned by DescribeScalingGroups "
                    "(deleted, or not Active: ESS leaves inactive groups out)",
                    code="InvalidScalingGroupId.NotFound",
                )
                pools.append(Pool(group, 0, listing_error=err))
                continue
            instances = by_group[gid]
            if isinstance(instances, CloudError):
                pools.append(Pool(group, 0, listing_error=instances))
                continue
            machines = tuple(
                Machine(
                    id=f"{region}.{inst['InstanceId']}",
                    group=gid,
                    state=lifecycle_state(str(inst.get("LifecycleState") or "")),
                    name=f"{region}.{inst['InstanceId']}",
                    handle=str(inst["InstanceId"]),
                )
                for inst in instances
                if inst.get("InstanceId")
            )
            desired = self._desired(record)
            with self._lock:
                self._records[gid] = record
                self._zones[gid] = Counter(str(i["ZoneId"]) for i in instances if i.get("ZoneId"))
            live = sum(1 for m in machines if m.state != InstanceState.DELETING)
            failure = self._last_failure(gid) if desired > live else None
            pools.append(Pool(group, desired, machines, failure=failure))
        with self._lock:
            unshaped = {gid: records[gid] for gid in current if gid in records and gid not in self._shapes}
        if unshaped:  # first sight of these groups (startup, or discovered): their templates now
            try:
                self._load_shapes(unshaped)
            except CloudError as err:
                log.warning("alicloud: templates of %s unavailable: %s", sorted(unshaped), err.message)
        return pools

    def _instances_of(self, gid: str) -> list[dict[str, Any]] | CloudError:
        try:
            return self.client.describe_scaling_instances(gid)
        except CloudError as err:
            return err

    @staticmethod
    def _desired(record: Mapping[str, Any]) -> int:
        """DesiredCapacity when the group has the expected-number feature; else the counters as
        in-tree (Active + Pending + Init), plus the states we show as running or creating
        (Pending:Wait, Protected, Standby, Stopped) so the target never falls below the nodes."""
        if record.get("EnableDesiredCapacity") and record.get("DesiredCapacity") is not None:
            return int(record["DesiredCapacity"])
        keys = ("ActiveCapacity", "PendingCapacity", "InitCapacity", "PendingWaitCapacity",
                "ProtectedCapacity", "StandbyCapacity", "StoppedCapacity")  # fmt: skip
        return sum(int(record.get(k) or 0) for k in keys)

    def _last_failure(self, gid: str) -> InstanceError | None:
        """The error of CA's newest finished scale-out activity if it did not succeed."""
        try:
            activities = self.client.describe_scaling_activities(gid, page_size=10)
        except CloudError as err:
            log.warning("alicloud: scaling activities of %s unavailable: %s", gid, err.message)
            return None
        for act in activities:  # newest first; only CA's own count, ESS's retries do not
            if _ours(act):
                # a newer scale-out of ours still running or successful hides an older failure
                return activity_error(act) if act.get("StatusCode") in _FAILED_ACTIVITY else None
        return None

    # ------------------------------------------------------------------ changes
    def set_size(self, group: str, size: int) -> Operation | None:
        answer = self.client.scale_with_adjustment(group, size, ACTIVITY_METADATA)
        activity = str(answer.get("ScalingActivityId") or "")
        return Operation(group, "scale", activity) if activity else None

    def remove_machines(self, group: str, machines: Sequence[Machine]) -> RemoveOutcome:
        failed: dict[str, CloudError] = {}
        activities: list[str] = []
        batches = [list(machines[i : i + REMOVE_BATCH]) for i in range(0, len(machines), REMOVE_BATCH)]
        for n, batch in enumerate(batches):
            by_instance = {m.handle or m.id.rpartition(".")[2]: m for m in batch}
            ids = sorted(by_instance)
            key = f"{group}|{','.join(ids)}"
            token = self._remove_token(key)
            try:
                answer = self.client.remove_instances(
                    group, ids, remove_policy=self.config.remove_policy, client_token=token
                )
            except CloudError as err:
                if err.status is not None:
                    self._remove_answered(key)  # ESS answered: a later request is a new one
                if n == 0 and not activities:
                    raise  # nothing happened yet: the machinery retries the whole call
                failed.update({m.id: err for m in batch})
                continue
            self._remove_answered(key)
            if answer.get("ScalingActivityId"):
                activities.append(str(answer["ScalingActivityId"]))
            for item in answer.get("IgnoredInstances") or []:
                iid = str(item.get("InstanceId") or "")
                machine = by_instance.get(iid)
                if machine is None:
                    continue
                code = str(item.get("Code") or "")
                gone = code == "InvalidInstanceId.NotFound" or (
                    code == "IncorrectInstanceStatus" and machine.state == InstanceState.DELETING
                )
                if gone:
                    continue  # already removed or being removed: done
                failed[machine.id] = CloudError(
                    f"alicloud RemoveInstances: instance {iid} was not removed: "
                    f"{code}: {item.get('Message', '')}",
                    code=code or "NOT_REMOVED",
                    status=400,
                    error_class=error_class(code),
                    # ESS ignores an instance it cannot remove in its current state (one still
                    # Pending, in our emulator's model); once started it can go: sent again later
                    transient=code == "IncorrectInstanceStatus" and machine.state == InstanceState.CREATING,
                )
        operation = Operation(group, "remove", ",".join(activities)) if activities else None
        return RemoveOutcome(failed=failed, operation=operation)

    def _remove_token(self, key: str) -> str:
        """The ClientToken of a removal batch: the same while its outcome is unknown (a timeout, a
        dropped connection), so the machinery's retry gets the first call's answer instead of a
        second removal; a new one once ESS has answered, so removing the same instances again later
        (after a refusal) is a new request rather than a replay of the old answer."""
        with self._lock:
            attempt = self._remove_attempts.get(key, 0)
        return "ca-" + hashlib.sha256(f"{key}|{attempt}".encode()).hexdigest()[:40]

    def _remove_answered(self, key: str) -> None:
        with self._lock:
            self._remove_attempts[key] = self._remove_attempts.pop(key, 0) + 1
            while len(self._remove_attempts) > 1024:  # oldest first
                del self._remove_attempts[next(iter(self._remove_attempts))]

    def poll(self, operation: Operation) -> OperationStatus:
        ids = [a for a in operation.ref.split(",") if a]
        if not ids:
            return OperationStatus(OperationState.SUCCEEDED)
        found = {
            str(a.get("ScalingActivityId")): a
            for a in self.client.describe_scaling_activities(operation.group, ids)
        }
        if any(found.get(a, {}).get("StatusCode") == "InProgress" for a in ids):
            return OperationStatus(OperationState.PENDING)
        for a in ids:
            act = found.get(a)
            if act is None:  # ESS no longer lists it: nothing to report, the listing decides
                log.info("alicloud: scaling activity %s of %s is not listed any more", a, operation.group)
                continue
            status = act.get("StatusCode")
            if status in ("Failed", "Rejected") or (status == "Warning" and operation.kind == "scale"):
                return OperationStatus(OperationState.FAILED, activity_error(act))
        return OperationStatus(OperationState.SUCCEEDED)

    # ------------------------------------------------------------------ catalogue and templates
    def refresh_catalog(self) -> None:
        """Reload every listed group's active configuration and the instance types they name (the
        machinery calls this when the catalogue TTL has passed). Groups not listed yet get theirs
        on the listing that first sees them. A group whose configuration cannot be read keeps its
        previous shape."""
        with self._lock:
            records = dict(self._records)
        self._load_shapes(records)

    def _load_shapes(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        configs: dict[str, dict[str, Any]] = {}
        for gid, record in records.items():
            config = self._configuration(gid, record)
            if config is not None:
                configs[gid] = config
        if not configs:
            return
        types = {t for c in configs.values() for t in self._type_candidates(c)}
        catalogue = {str(t.get("InstanceTypeId")): t for t in self.client.describe_instance_types(types)}
        zones = {gid: self._first_vswitch_zone(records[gid]) for gid in configs}
        with self._lock:
            for gid, config in configs.items():
                chosen = next((catalogue[t] for t in self._type_candidates(config) if t in catalogue), None)
                if chosen is None:
                    log.warning("alicloud: no instance type of group %s is in the ECS catalogue", gid)
                    continue
                self._shapes[gid] = _Shape(config, chosen, zones[gid])

    def _first_vswitch_zone(self, record: Mapping[str, Any]) -> str:
        ids = record.get("VSwitchIds") or []
        if isinstance(ids, dict):
            ids = next(iter(ids.values()), [])
        first = str((list(ids) or [record.get("VSwitchId") or ""])[0] or "")
        if not first:
            return ""
        if first not in self._vswitch_zones:
            try:
                zone = self.client.vswitch_zone(first)
            except CloudError as err:  # e.g. no vpc:DescribeVSwitches permission: zone from instances
                log.warning("alicloud: zone of vSwitch %s unavailable: %s", first, err.message)
                return ""
            if zone:
                self._vswitch_zones[first] = zone
        return self._vswitch_zones.get(first, "")

    def _configuration(self, gid: str, record: Mapping[str, Any]) -> dict[str, Any] | None:
        active = str(record.get("ActiveScalingConfigurationId") or "")
        if not active and record.get("LaunchTemplateId"):
            return self._launch_template_configuration(gid, record)
        try:
            configs = self.client.describe_scaling_configurations(gid, [active] if active else [])
        except CloudError as err:
            log.warning("alicloud: scaling configuration of %s unavailable: %s", gid, err.message)
            return None
        if not configs:
            log.warning(
                "alicloud: group %s has no scaling configuration (launch template without overrides?)", gid
            )
            return None
        return configs[0]

    def _launch_template_configuration(self, gid: str, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """A launch-template group's shape in scaling-configuration terms: the template version's
        instance type, instance tags, system disk and zone; the group's LaunchTemplateOverrides
        instance types come first (ESS tries them in order)."""
        template_id = str(record["LaunchTemplateId"])
        try:
            data = self.client.launch_template_data(
                template_id, str(record.get("LaunchTemplateVersion") or "")
            )
        except CloudError as err:
            log.warning("alicloud: launch template %s of %s unavailable: %s", template_id, gid, err.message)
            data = None
        data = data or {}
        overrides = [o for o in record.get("LaunchTemplateOverrides") or [] if isinstance(o, dict)]
        types = [str(o["InstanceType"]) for o in overrides if o.get("InstanceType")]
        if data.get("InstanceType"):
            types.append(str(data["InstanceType"]))
        if not types:
            log.warning("alicloud: launch template %s of %s names no instance type", template_id, gid)
            return None
        tags = data.get("Tags") or {}
        tag_list = tags.get("InstanceTag") if isinstance(tags, dict) else tags
        disk = data.get("SystemDisk") or {}
        return {
            "InstanceTypes": list(dict.fromkeys(types)),
            "Tags": [t for t in tag_list or [] if isinstance(t, dict)],
            "SystemDiskSize": disk.get("Size") if isinstance(disk, dict) else None,
            "ZoneId": data.get("ZoneId") or "",
        }

    @staticmethod
    def _type_candidates(config: Mapping[str, Any]) -> list[str]:
        """A multi-type configuration tries its InstanceTypes in order (vendor doc: priority);
        the template is the first one the catalogue knows."""
        types = config.get("InstanceTypes") or []
        if isinstance(types, dict):
            types = next(iter(types.values()), [])
        out = [str(t) for t in types if t]
        if config.get("InstanceType") and str(config["InstanceType"]) not in out:
            out.insert(0, str(config["InstanceType"]))
        return out

    def template(self, group: str) -> NodeTemplate | None:
        with self._lock:
            shape = self._shapes.get(group)
            record = self._records.get(group, {})
            zones = self._zones.get(group, Counter())
        if shape is None:
            return None
        itype = shape.instance_type
        cores = int(itype.get("CpuCoreCount") or 0)
        memory_gib = float(itype.get("MemorySize") or 0)
        if cores <= 0 or memory_gib <= 0:
            return None
        capacity = {"cpu": str(cores), "memory": f"{round(memory_gib * 1024)}Mi"}
        disk = shape.config.get("SystemDiskSize")
        if isinstance(disk, int | float) and disk > 0:
            capacity["ephemeral-storage"] = f"{int(disk)}Gi"
        labels: dict[str, str] = {}
        taints: list[Taint] = []
        gpus = int(itype.get("GPUAmount") or 0)
        if gpus > 0:
            capacity[GPU_RESOURCE] = str(gpus)
            value = gpu_label_value(str(itype.get("GPUSpec") or ""))
            if value:
                labels[GPU_LABEL] = value
        tags = shape.config.get("Tags") or []
        if isinstance(tags, dict):
            tags = next(iter(tags.values()), [])
        for tag in tags:
            key, value = str(tag.get("Key") or ""), str(tag.get("Value") or "")
            if key.startswith(TEMPLATE_TAINT_TAG):
                tvalue, _, effect = value.partition(":")
                if effect in _TAINT_EFFECTS:
                    taints.append(Taint(key.removeprefix(TEMPLATE_TAINT_TAG), tvalue, effect))
                continue
            key = key.removeprefix(TEMPLATE_LABEL_TAG)
            # in-tree copies every configuration tag as a label; tags that are not valid labels
            # (acs:* system tags, spaces) would make CA reject the whole template, so they are skipped
            if _LABEL_KEY_RE.match(key) and _LABEL_VALUE_RE.match(value) and not key.startswith("acs:"):
                labels[key] = value
        # the configuration's zone, else the first vSwitch's, else where most instances are
        zone = str(shape.config.get("ZoneId") or "") or shape.zone
        if not zone and zones:
            zone = sorted(zones.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        arch = "arm64" if str(itype.get("CpuArchitecture") or "").upper() == "ARM" else "amd64"
        reserved = {k: v for k, v in self.config.reserved.items() if k in capacity}
        return NodeTemplate(
            capacity=capacity,
            reserved=reserved,
            labels=labels,
            taints=tuple(taints),
            instance_type=str(itype.get("InstanceTypeId") or ""),
            region=str(record.get("RegionId") or self.config.region),
            zone=zone,
            arch=arch,
        )

    def gpu_types(self) -> list[str]:
        with self._lock:
            shapes = list(self._shapes.values())
        return sorted(
            {
                gpu_label_value(str(s.instance_type.get("GPUSpec") or ""))
                for s in shapes
                if int(s.instance_type.get("GPUAmount") or 0) > 0 and s.instance_type.get("GPUSpec")
            }
        )

    # ------------------------------------------------------------------ node matching
    def machine_of(self, node: NodeRef) -> str | None:
        """`alicloud://<region>.<id>` providerIDs, and ACK node names (`<region>.<id>`) of nodes
        without a providerID, as the `<region>.<id>` we list."""
        if node.provider_id.startswith("alicloud://"):
            return node.provider_id.removeprefix("alicloud://")
        if not node.provider_id and _NODE_NAME_RE.match(node.name):
            return node.name
        return None

    def fallback_version(self) -> object:
        return None  # machine_of reads the node only

    def close(self) -> None:
        with self._pool_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None
        self.client.close()


__all__ = ["GPU_LABEL", "AliCloudDriver", "ErrorClass", "gpu_label_value", "lifecycle_state"]
