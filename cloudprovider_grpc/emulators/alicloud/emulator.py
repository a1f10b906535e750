"""An AliCloud API emulator served over real HTTP, shipped with the product: ESS (API versions
2014-08-28 and 2022-02-22), ECS DescribeInstanceTypes (2014-05-26), STS AssumeRoleWithOIDC
(2015-04-01) and the ECS metadata server's RAM-role paths, all on one port.

What it reproduces (the vendor API references, the Tea SDK's models):
- RPC routing on `/` (GET or POST) by `Action`/`Version` (query or form body) or the V3 headers
  `x-acs-action`/`x-acs-version`; unknown action `InvalidAction.NotFound`, bad version
  `InvalidVersion`;
- signatures V1 (HMAC-SHA1) and V3 (ACS3-HMAC-SHA256) verified over the request as sent, with
  nonce reuse (`SignatureNonceUsed`) and the ±15 minute timestamp window (`InvalidTimeStamp.Expired`),
  unknown keys (`InvalidAccessKeyId.NotFound`), temporary keys needing their `SecurityToken`
  (`InvalidSecurityToken.*`), all in the JSON error envelope `{RequestId, HostId, Code, Message,
  Recommend}`;
- scaling groups whose counters are derived from the instance list; lifecycle states on the
  (injectable) clock: `Pending` -> `InService`, `Removing` -> gone; asynchronous scaling activities
  (`InProgress` -> `Successful`/`Warning`/`Failed`/`Rejected`) with injectable outcomes and stock per
  instance type (an empty stock fails the activity with `OperationDenied.NoStock`);
  ScaleWithAdjustment clamps to [MinSize, MaxSize] (vendor doc) and, on groups without the
  expected-number feature, refuses while an activity runs (`ScalingActivityInProgress`);
  RemoveInstances (at most 20, `IgnoreInvalidInstance`, `DecreaseDesiredCapacity`, `RemovePolicy`,
  the MinSize check, `ClientToken` idempotence);
- throttling as HTTP 400 `Throttling.User` with `x-acs-retry-after` (milliseconds) from the base's
  rate limit and throttle faults; 5xx faults as `InternalError`/`ServiceUnavailable`.
Reconstructions (not documented anywhere we could read) are marked in comments.
"""

from __future__ import annotations

from cloudprovider_grpc.emulators.alicloud.acs import (
    ECS_VERSION,
    ESS_VERSIONS,
    STS_VERSION,
    VPC_VERSION,
    AcsError,
    Handler,
)
from cloudprovider_grpc.emulators.alicloud.ess import EssActions
from cloudprovider_grpc.emulators.alicloud.services import ServiceActions

__all__ = ["AcsError", "AliCloudEmulator"]


class AliCloudEmulator(EssActions, ServiceActions):
    """The whole emulator: the core (core.py) and its request side (rpc.py) with the ESS actions
    (ess.py) and the other services (services.py)."""

    def _add_routes(self) -> None:
        super()._add_routes()
        self.route("GET", "/latest/meta-data/ram/security-credentials/", self._metadata_roles)
        self.route("GET", "/latest/meta-data/ram/security-credentials/{role}", self._metadata_credentials)
        self.route("GET", "/latest/meta-data/Ram/security-credentials/{role}", self._metadata_credentials)
        self.route("GET", "/latest/meta-data/region-id", self._metadata_region)

    def _action_table(self) -> dict[str, tuple[tuple[str, ...], Handler]]:
        return {
            "DescribeScalingGroups": (ESS_VERSIONS, self._describe_groups),
            "DescribeScalingInstances": (ESS_VERSIONS, self._describe_instances),
            "DescribeScalingConfigurations": (ESS_VERSIONS, self._describe_configurations),
            "DescribeScalingActivities": (ESS_VERSIONS, self._describe_activities),
            "ScaleWithAdjustment": (ESS_VERSIONS, self._scale_with_adjustment),
            "RemoveInstances": (ESS_VERSIONS, self._remove_instances),
            "DescribeInstanceTypes": ((ECS_VERSION,), self._describe_instance_types),
            "DescribeVSwitches": ((VPC_VERSION,), self._describe_vswitches),
            "DescribeLaunchTemplateVersions": ((ECS_VERSION,), self._describe_launch_template_versions),
            "AssumeRoleWithOIDC": ((STS_VERSION,), self._assume_role_with_oidc),
        }
