"""AliCloud ESS scaling groups on the pool shape: ESS owns each group's desired capacity.

Per Refresh: one DescribeScalingGroups for up to 20 groups and one DescribeScalingInstances (100 a
page) per group; DescribeScalingActivities only for a group whose desired capacity is above its
instances (the only case where CA shows placeholders that a failed scale-out should explain).
Changes: ScaleWithAdjustment(TotalCapacity) for a new size, RemoveInstances (20 a call, lowering
the desired capacity, invalid instances reported one by one) for named nodes. Both return a scaling
activity the machinery polls with `poll`. Templates come from the active scaling configuration (or
the launch template overrides) and ECS DescribeInstanceTypes, cached for the catalogue TTL
(catalogue.py).

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
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, InstanceError
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.providers.alicloud.catalogue import GPU_LABEL, Catalogue
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

#: what the in-tree provider puts in ActivityMetadata (alicloud_auto_scaling.go); we use the same key
#: so activities started by either are recognised as CA's
ACTIVITY_METADATA = {"cluster-autoscaler/alicloud/managed": "true"}
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
_NODE_NAME_RE = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+\.i-[a-z0-9]+$")


def lifecycle_state(state: str) -> InstanceState:
    return _STATES.get(state, InstanceState.RUNNING)


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
        #: each group's configuration, instance type and zone, for its template (catalogue.py)
        self._catalogue = Catalogue(client, config.region, config.reserved)
        #: removal batch -> how many of its requests ESS has answered (see _remove_token)
        self._remove_attempts: dict[str, int] = {}
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

    def offered_groups(self) -> list[GroupConfig]:
        """Every active scaling group of the region (one paged DescribeScalingGroups without ids
        or tags): `--nodes` names groups by id, and `check-config` suggests among these."""
        out: list[GroupConfig] = []
        for r in self.client.discover_scaling_groups({}):
            gid = str(r.get("ScalingGroupId") or "")
            if gid:
                lo, hi = int(r.get("MinSize") or 0), int(r.get("MaxSize") or 0)
                out.append(GroupConfig(gid, lo, hi, name=str(r.get("ScalingGroupName") or gid)))
        return out

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
            unshaped = {
                gid: records[gid] for gid in current if gid in records and not self._catalogue.knows(gid)
            }
        if unshaped:  # first sight of these groups (startup, or discovered): their templates now
            try:
                self._catalogue.load(unshaped)
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
        self._catalogue.load(records)

    def template(self, group: str) -> NodeTemplate | None:
        with self._lock:
            record = self._records.get(group, {})
            zones = self._zones.get(group, Counter())
        return self._catalogue.template(group, record, zones)

    def gpu_types(self) -> list[str]:
        return self._catalogue.gpu_types()

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


__all__ = ["AliCloudDriver", "ErrorClass", "lifecycle_state"]
