"""The ESS and ECS calls the AliCloud backend makes, RPC style, signed with V3 (signer.py), on the
shared HTTP layer.

Transport facts (the Tea SDK's generated clients, alibabacloud-ess20220222 1.13.3 and
alibabacloud-ecs20140526 7.11.8): every action is
`/` with its parameters in the query string; repeated parameters are numbered (`InstanceIds.1`);
ESS 2022-02-22 answers plain JSON arrays; ECS 2014-05-26 wraps lists (`InstanceTypes.InstanceType`).
Reads (`Describe*`) are sent as GET (the RPC gateway accepts GET and POST; the vendor's request
examples use GET), so the shared HTTP layer may re-send them after a lost answer; changes are POST
and are never re-sent once they may have reached the cloud, except after a throttling answer (a
refusal before processing).

Endpoints: the regional public endpoints the vendor SDKs compute, or explicit
overrides; never the Location service the in-tree SDK depended on (kubernetes/autoscaler #8168,
#3670).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cloudprovider_grpc.core.clock import Clock, or_wall
from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.http import HttpClient, RetryPolicy
from cloudprovider_grpc.providers.alicloud.credentials import CredentialSource
from cloudprovider_grpc.providers.alicloud.errors import ApiError
from cloudprovider_grpc.providers.alicloud.signer import AcsV3Auth

log = logging.getLogger(__name__)

ESS_VERSION = "2022-02-22"
ECS_VERSION = "2014-05-26"
VPC_VERSION = "2016-04-28"
_VERSIONS = {"ess": ESS_VERSION, "ecs": ECS_VERSION, "vpc": VPC_VERSION}
#: DescribeScalingInstances maximum page size (vendor doc; in-tree used 10 and slept 200 ms a page)
INSTANCE_PAGE_SIZE = 100
#: DescribeScalingGroups: at most 20 ids per call, pages of at most 50 (vendor doc)
GROUP_IDS_PER_CALL = 20
GROUP_PAGE_SIZE = 50
#: RemoveInstances takes at most 20 instance ids (vendor doc)
REMOVE_BATCH = 20
#: DescribeInstanceTypes: at most 10 InstanceTypes.N filters; MaxResults up to 1600 (vendor doc)
TYPES_PER_CALL = 10
#: regions whose ESS endpoint is the central one (the endpoint map of the alibabacloud-ess20220222
#: 1.13.3 client)
_CENTRAL_ESS_REGIONS = frozenset(
    {
        "cn-hangzhou",
        "cn-shanghai",
        "cn-beijing",
        "cn-shenzhen",
        "cn-qingdao",
        "cn-hongkong",
        "ap-southeast-1",
        "us-east-1",
        "us-west-1",
    }
)


def default_endpoint(product: str, region: str) -> str:
    """The public HTTPS endpoint of `product` ("ess", "ecs", "vpc", "sts") in `region`."""
    if product == "ess":
        host = "ess.aliyuncs.com" if region in _CENTRAL_ESS_REGIONS else f"ess.{region}.aliyuncs.com"
    elif product == "ecs":
        host = "ecs-cn-hangzhou.aliyuncs.com" if region == "cn-hangzhou" else f"ecs.{region}.aliyuncs.com"
    elif product == "vpc":
        host = f"vpc.{region}.aliyuncs.com"
    elif product == "sts":
        host = "sts.aliyuncs.com"
    else:
        raise ValueError(product)
    return f"https://{host}/"


def flatten(params: Mapping[str, Any]) -> dict[str, str]:
    """RPC parameters as strings: lists become `Name.1`, `Name.2`...; booleans `true`/`false`;
    None and "" are left out (the vendor clients never send empty values)."""
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None or value == "":
            continue
        if isinstance(value, list | tuple):
            for i, item in enumerate(value, 1):
                out[f"{key}.{i}"] = str(item)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


class AliClient:
    """Typed ESS/ECS calls. Thread-safe. Endpoints are resolved on first use, so a region read
    from the metadata server costs nothing at startup."""

    def __init__(
        self,
        credentials: CredentialSource,
        *,
        region: str = "",
        ess_url: str = "",
        ecs_url: str = "",
        vpc_url: str = "",
        timeout: tuple[float, float] = (3.05, 10.0),
        retries: int = 4,
        rate_limit_per_s: float | None = None,
        max_elapsed: float = 8.0,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.credentials = credentials
        self._region = region
        self._urls = {"ess": ess_url, "ecs": ecs_url, "vpc": vpc_url}
        self.timeout = timeout
        self.retry = RetryPolicy(retries=retries)
        self.rate_limit_per_s = rate_limit_per_s
        self.max_elapsed = max_elapsed
        # back-offs, their jitter and the retry budget on the backend's clock (core/clock.py)
        self._clock = or_wall(clock)
        self._sleep = sleep or self._clock.sleep
        self._rng = rng or self._clock.rng()
        self._auth = AcsV3Auth(credentials)
        self._http: dict[str, HttpClient] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AliClient(region={self._region!r}, credentials={self.credentials.mode})"

    @property
    def region(self) -> str:
        if not self._region:
            self._region = self.credentials.region()
            if not self._region:
                raise CloudError("alicloud: no region (set REGION_ID)")
        return self._region

    def _client(self, product: str) -> HttpClient:
        with self._lock:
            http = self._http.get(product)
            if http is None:
                url = self._urls.get(product) or default_endpoint(product, self.region)
                http = self._http[product] = HttpClient(
                    f"alicloud-{product}",
                    url,
                    auth=self._auth,
                    timeout=self.timeout,
                    retry=self.retry,
                    rate_limit_per_s=self.rate_limit_per_s,
                    rate_burst=max(1.0, self.rate_limit_per_s or 1.0),
                    max_elapsed=self.max_elapsed,
                    user_agent="cloudprovider-grpc/alicloud",
                    sleep=self._sleep,
                    clock=self._clock,
                )
            return http

    def close(self) -> None:
        with self._lock:
            for http in self._http.values():
                http.close()
            self._http.clear()
        self.credentials.close()

    # ------------------------------------------------------------------ one call
    def call(
        self,
        product: str,
        action: str,
        params: Mapping[str, Any],
        *,
        read: bool,
        urgent: bool = False,
    ) -> dict[str, Any]:
        """One action; returns the decoded JSON body or raises CloudError."""
        version = _VERSIONS[product]
        query = {"Action": action, "Version": version, **flatten(params)}
        where = f"alicloud {product} {action}"
        http = self._client(product)
        started = self._clock.monotonic()
        refreshed = False
        attempt = 0
        while True:
            reply = http.request(
                "GET" if read else "POST",
                "/",
                operation=action,
                params=query,
                ok=range(100, 600),
                urgent=urgent,
            )
            if reply.status == 200:
                data = reply.json()
                if not isinstance(data, dict):
                    raise CloudError(f"{where}: the answer is not a JSON object", transient=True)
                return data
            err = ApiError.from_reply(reply.status, reply.body, reply.headers)
            if err.stale_credential and self.credentials.temporary and not refreshed:
                # the key expired early or was revoked: the request was refused, so send it again
                log.info("%s: %s; fetching a new temporary key", where, err.code)
                self.credentials.get(force_refresh=True)
                refreshed = True
                continue
            retryable = err.throttled or (read and err.status >= 500)
            if retryable and attempt < self.retry.retries:
                delay = self.retry.backoff(attempt, self._rng)
                if err.retry_after is not None:
                    delay = min(err.retry_after, self.retry.max_retry_after)
                if self._clock.monotonic() - started + delay <= self.max_elapsed:
                    log.info("%s: %s; retrying in %.2fs", where, err.code, delay)
                    self._sleep(delay)
                    attempt += 1
                    continue
            raise err.to_cloud_error(where)

    # ------------------------------------------------------------------ ESS
    def describe_scaling_groups(self, group_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The groups with these ids (inactive groups are not returned: vendor doc)."""
        groups: list[dict[str, Any]] = []
        ids = list(dict.fromkeys(group_ids))
        for start in range(0, len(ids), GROUP_IDS_PER_CALL):
            chunk = ids[start : start + GROUP_IDS_PER_CALL]
            data = self.call(
                "ess",
                "DescribeScalingGroups",
                {"RegionId": self.region, "ScalingGroupIds": chunk, "PageSize": GROUP_PAGE_SIZE},
                read=True,
                urgent=True,
            )
            groups.extend(g for g in _list(data.get("ScalingGroups")) if isinstance(g, dict))
        return groups

    def discover_scaling_groups(self, tags: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every active group carrying all these tags (an empty value matches any), 50 a page."""
        out: list[dict[str, Any]] = []
        page = 1
        tag_params: dict[str, str] = {}
        for n, (key, value) in enumerate(sorted(tags.items()), 1):
            tag_params[f"Tags.{n}.Key"] = key
            if value:
                tag_params[f"Tags.{n}.Value"] = value
        while True:
            data = self.call(
                "ess",
                "DescribeScalingGroups",
                {"RegionId": self.region, "PageNumber": page, "PageSize": GROUP_PAGE_SIZE, **tag_params},
                read=True,
                urgent=True,
            )
            items = [g for g in _list(data.get("ScalingGroups")) if isinstance(g, dict)]
            out.extend(items)
            if not items or len(out) >= _int(data.get("TotalCount"), len(out)):
                return out
            page += 1

    def describe_scaling_instances(self, group_id: str) -> list[dict[str, Any]]:
        """Every instance of the group in every lifecycle state, 100 a page."""
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            data = self.call(
                "ess",
                "DescribeScalingInstances",
                {
                    "RegionId": self.region,
                    "ScalingGroupId": group_id,
                    "PageNumber": page,
                    "PageSize": INSTANCE_PAGE_SIZE,
                },
                read=True,
                urgent=True,
            )
            items = [i for i in _list(data.get("ScalingInstances")) if isinstance(i, dict)]
            out.extend(items)
            total = _int(data.get("TotalCount"), len(out))
            if not items or len(out) >= total:
                return out
            page += 1

    def describe_scaling_configurations(
        self, group_id: str, configuration_ids: Iterable[str] = ()
    ) -> list[dict[str, Any]]:
        ids = [c for c in configuration_ids if c]
        data = self.call(
            "ess",
            "DescribeScalingConfigurations",
            {
                "RegionId": self.region,
                "ScalingGroupId": group_id,
                "ScalingConfigurationIds": ids or None,
                "PageSize": 50,
            },
            read=True,
        )
        return [c for c in _list(data.get("ScalingConfigurations")) if isinstance(c, dict)]

    def describe_scaling_activities(
        self, group_id: str, activity_ids: Sequence[str] = (), page_size: int = 10
    ) -> list[dict[str, Any]]:
        """Activities of the group, newest first (or exactly those ids)."""
        data = self.call(
            "ess",
            "DescribeScalingActivities",
            {
                "RegionId": self.region,
                "ScalingGroupId": group_id,
                "ScalingActivityIds": list(activity_ids) or None,
                "PageSize": max(page_size, len(activity_ids)),
            },
            read=True,
        )
        return [a for a in _list(data.get("ScalingActivities")) if isinstance(a, dict)]

    def scale_with_adjustment(self, group_id: str, total: int, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Set the group's total capacity (in-tree since CA 1.32: AdjustmentType TotalCapacity,
        SyncActivity true, ActivityMetadata naming us)."""
        return self.call(
            "ess",
            "ScaleWithAdjustment",
            {
                "ScalingGroupId": group_id,
                "AdjustmentType": "TotalCapacity",
                "AdjustmentValue": total,
                "SyncActivity": True,
                "ActivityMetadata": json.dumps(dict(metadata), separators=(",", ":")),
            },
            read=False,
        )

    def remove_instances(
        self, group_id: str, instance_ids: Sequence[str], *, remove_policy: str, client_token: str
    ) -> dict[str, Any]:
        """Remove up to 20 instances, lowering the desired capacity with them; invalid instances
        are skipped and listed in `IgnoredInstances` instead of failing the whole batch."""
        if not 0 < len(instance_ids) <= REMOVE_BATCH:
            raise ValueError(f"RemoveInstances takes 1..{REMOVE_BATCH} instances, got {len(instance_ids)}")
        return self.call(
            "ess",
            "RemoveInstances",
            {
                "RegionId": self.region,
                "ScalingGroupId": group_id,
                "InstanceIds": list(instance_ids),
                "RemovePolicy": remove_policy,
                "DecreaseDesiredCapacity": True,
                "IgnoreInvalidInstance": True,
                "ClientToken": client_token,
            },
            read=False,
        )

    # ------------------------------------------------------------------ ECS
    def describe_instance_types(self, types: Iterable[str]) -> list[dict[str, Any]]:
        """The catalogue entries of these instance types (10 per call, paged by NextToken)."""
        wanted = sorted({t for t in types if t})
        out: list[dict[str, Any]] = []
        for start in range(0, len(wanted), TYPES_PER_CALL):
            token = ""
            while True:
                data = self.call(
                    "ecs",
                    "DescribeInstanceTypes",
                    {
                        "RegionId": self.region,
                        "InstanceTypes": wanted[start : start + TYPES_PER_CALL],
                        "MaxResults": 1600,
                        "NextToken": token or None,
                    },
                    read=True,
                )
                wrapped = data.get("InstanceTypes")
                items = wrapped.get("InstanceType") if isinstance(wrapped, dict) else wrapped
                out.extend(i for i in _list(items) if isinstance(i, dict))
                token = str(data.get("NextToken") or "")
                if not token:
                    break
        return out

    def launch_template_data(self, template_id: str, version: str) -> dict[str, Any] | None:
        """`LaunchTemplateData` of a launch template version as ESS names it: a number, `Default` or
        `Latest` (ECS DescribeLaunchTemplateVersions, DetailFlag true); None when not found."""
        params: dict[str, Any] = {
            "RegionId": self.region,
            "LaunchTemplateId": template_id,
            "DetailFlag": True,
        }
        if version.isdigit():
            params["LaunchTemplateVersion"] = [version]
        elif version.lower() == "default" or not version:
            params["DefaultVersion"] = True
        best: dict[str, Any] | None = None
        page = 1
        while True:  # "Latest": the highest version number over every page
            data = self.call(
                "ecs",
                "DescribeLaunchTemplateVersions",
                {**params, "PageNumber": page, "PageSize": 50},
                read=True,
            )
            wrapped = data.get("LaunchTemplateVersionSets")
            items = wrapped.get("LaunchTemplateVersionSet") if isinstance(wrapped, dict) else wrapped
            sets = [v for v in _list(items) if isinstance(v, dict)]
            for v in sets:
                if best is None or _int(v.get("VersionNumber"), 0) > _int(best.get("VersionNumber"), 0):
                    best = v
            if not sets or page * 50 >= _int(data.get("TotalCount"), 0):
                break
            page += 1
        found = best.get("LaunchTemplateData") if best else None
        return found if isinstance(found, dict) else None

    # ------------------------------------------------------------------ VPC
    def vswitch_zone(self, vswitch_id: str) -> str:
        """The zone of a vSwitch (VPC DescribeVSwitches 2016-04-28, one id per call); "" if unknown."""
        data = self.call(
            "vpc", "DescribeVSwitches", {"RegionId": self.region, "VSwitchId": vswitch_id}, read=True
        )
        wrapped = data.get("VSwitches")
        items = wrapped.get("VSwitch") if isinstance(wrapped, dict) else wrapped
        for item in _list(items):
            if isinstance(item, dict) and item.get("VSwitchId") == vswitch_id:
                return str(item.get("ZoneId") or "")
        return ""


def _list(value: Any) -> list[Any]:
    """A JSON list, also from the 2014-08-28 wrapped form ({"ScalingGroup": [...]})."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and len(value) == 1:
        inner = next(iter(value.values()))
        return inner if isinstance(inner, list) else []
    return []


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
