"""What the AliCloud driver knows of each group's shape, for CA's node templates: the active
scaling configuration (or, for a launch-template group, the template version and its overrides),
the ECS instance type it names and the zone of its first vSwitch, reloaded on the catalogue TTL; and
the template built from them (capacity, GPU label, labels and taints from tags, zone, arch). Kept
apart from the driver's listing and changes (driver.py), which only hand it the groups' records."""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.k8s.template import NodeTemplate, Taint
from cloudprovider_grpc.providers.alicloud.client import AliClient

log = logging.getLogger(__name__)


GPU_LABEL = "aliyun.accelerator/nvidia_name"
GPU_RESOURCE = "nvidia.com/gpu"
#: AWS-style node-template tags (an extension; in-tree copies every tag as a label)
TEMPLATE_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/"
TEMPLATE_TAINT_TAG = "k8s.io/cluster-autoscaler/node-template/taint/"
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_KEY_RE = re.compile(
    rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
)
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def gpu_label_value(spec: str) -> str:
    """`aliyun.accelerator/nvidia_name` from ECS `GPUSpec`: spaces become dashes ("NVIDIA T4" ->
    "NVIDIA-T4"). Inferred: ACK nodes carry the driver's product name with dashes ("Tesla-V100-
    SXM2-16GB"), which ECS does not publish; a scaling-configuration tag with this key wins."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", spec.strip()).strip("-_.")
    return value[:63].rstrip("-_.")


@dataclass
class _Shape:
    """What the catalogue knows of one group: its configuration, its instance type, and the zone of
    its first vSwitch (where ESS's default PRIORITY multi-zone policy puts new instances first)."""

    config: dict[str, Any] = field(default_factory=dict)
    instance_type: dict[str, Any] = field(default_factory=dict)
    zone: str = ""


class Catalogue:
    """The groups' shapes: loaded by `load` from the records of a listing, read by `template`."""

    def __init__(self, client: AliClient, region: str, reserved: Mapping[str, str]) -> None:
        self.client = client
        self._region = region
        self._reserved = dict(reserved)
        self._lock = threading.Lock()
        self._shapes: dict[str, _Shape] = {}
        #: vSwitch id -> zone (a vSwitch never changes zone, so this is never reloaded)
        self._vswitch_zones: dict[str, str] = {}

    def knows(self, group: str) -> bool:
        """Whether the group's shape was loaded."""
        with self._lock:
            return group in self._shapes

    def load(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Load the shapes of these groups (id -> ESS record); a group whose configuration cannot be
        read keeps its previous shape."""
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

    def template(self, group: str, record: Mapping[str, Any], zones: Counter[str]) -> NodeTemplate | None:
        """The group's node template from its shape, its ESS record and the zones its instances are
        in (None until its shape is known)."""
        with self._lock:
            shape = self._shapes.get(group)
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
        reserved = {k: v for k, v in self._reserved.items() if k in capacity}
        return NodeTemplate(
            capacity=capacity,
            reserved=reserved,
            labels=labels,
            taints=tuple(taints),
            instance_type=str(itype.get("InstanceTypeId") or ""),
            region=str(record.get("RegionId") or self._region),
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
