"""The AliCloud emulator's other services on the same port: ECS DescribeInstanceTypes and
DescribeLaunchTemplateVersions, VPC DescribeVSwitches, STS AssumeRoleWithOIDC and the ECS metadata
server's RAM-role paths."""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

from cloudprovider_grpc.emulators import Request, Response
from cloudprovider_grpc.emulators.alicloud.acs import (
    AccessKey,
    AcsError,
    fail,
    flag,
    iso_time,
    random_id,
)
from cloudprovider_grpc.emulators.alicloud.rpc import AcsRpc


class ServiceActions(AcsRpc):
    """ECS, VPC, STS and the metadata server."""

    # ------------------------------------------------------------------ ECS
    def _describe_instance_types(self, params: dict[str, str], version: str) -> dict[str, Any]:
        wanted = self._numbered(params, "InstanceTypes")
        if len(wanted) > 10:
            raise AcsError(400, "InvalidParameter", "At most 10 InstanceTypes may be given.")
        try:
            limit = int(params.get("MaxResults") or 1600)
            offset = int(params.get("NextToken") or 0)
        except ValueError:
            raise fail("InvalidNextToken") from None
        if not 1 <= limit <= 1600:
            raise AcsError(400, "InvalidParameter", "MaxResults must be 1..1600.")
        types = [t for t in self.instance_types if not wanted or t["InstanceTypeId"] in wanted]
        page = types[offset : offset + limit]
        body: dict[str, Any] = {"InstanceTypes": {"InstanceType": copy.deepcopy(page)}}
        if offset + limit < len(types):
            body["NextToken"] = str(offset + limit)
        return body

    def _describe_launch_template_versions(self, params: dict[str, str], version: str) -> dict[str, Any]:
        template_id = params.get("LaunchTemplateId", "")
        if template_id not in self.launch_templates:
            raise AcsError(
                404, "InvalidLaunchTemplate.NotFound", "The specified launch template does not exist."
            )
        numbers = {int(v) for v in self._numbered(params, "LaunchTemplateVersion") if v.isdigit()}
        default_only = flag(params.get("DefaultVersion"), False)
        detail = flag(params.get("DetailFlag"), False)
        number, size = self._page(params, 10, 50)
        found = [
            copy.deepcopy(v)
            for v in self.launch_templates[template_id]
            if (not numbers or v["VersionNumber"] in numbers) and (not default_only or v["DefaultVersion"])
        ]
        for v in found:
            if not detail:
                v.pop("LaunchTemplateData", None)
        page = found[(number - 1) * size : number * size]
        return {
            "LaunchTemplateVersionSets": {"LaunchTemplateVersionSet": page},
            "TotalCount": len(found),
            "PageNumber": number,
            "PageSize": size,
        }

    # ------------------------------------------------------------------ VPC
    def _describe_vswitches(self, params: dict[str, str], version: str) -> dict[str, Any]:
        """The groups' vSwitches (each group's `VSwitchIds` paired with its `Zones`)."""
        number, size = self._page(params, 50, 50)
        found: list[dict[str, Any]] = []
        for g in sorted(self.groups.values(), key=lambda g: g["ScalingGroupId"]):
            for vsw, zone in zip(g.get("VSwitchIds") or [], g.get("Zones") or [], strict=False):
                if params.get("VSwitchId") not in (None, "", vsw) or params.get("ZoneId") not in (
                    None,
                    "",
                    zone,
                ):
                    continue
                if not any(v["VSwitchId"] == vsw for v in found):
                    found.append(
                        {
                            "VSwitchId": vsw,
                            "ZoneId": zone,
                            "VpcId": "vpc-bp1emulated0000000",
                            "Status": "Available",
                            "CidrBlock": "172.16.0.0/24",
                            "IsDefault": False,
                        }
                    )
        page = found[(number - 1) * size : number * size]
        return {
            "VSwitches": {"VSwitch": page},
            "TotalCount": len(found),
            "PageNumber": number,
            "PageSize": size,
        }

    # ------------------------------------------------------------------ STS and metadata
    def _issue_key(self, duration: float) -> tuple[str, AccessKey]:
        key_id = f"STS.{random_id(24)}"
        key = AccessKey(secrets.token_urlsafe(24), f"CAIS{secrets.token_urlsafe(48)}", time.time() + duration)
        self.keys[key_id] = key
        return key_id, key

    def _assume_role_with_oidc(self, params: dict[str, str], version: str) -> dict[str, Any]:
        for name in ("RoleArn", "OIDCProviderArn", "OIDCToken", "RoleSessionName"):
            self._require(params, name)
        if params["OIDCToken"] not in self.oidc_tokens:
            # [reconstruction] STS's exact code for a token it cannot verify
            raise fail("AuthenticationFail.OIDCToken.Invalid")
        if self.role_arns and params["RoleArn"] not in self.role_arns:
            raise fail("EntityNotExist.Role")
        try:
            duration = int(params.get("DurationSeconds") or 3600)
        except ValueError:
            raise fail("InvalidParameter.DurationSeconds") from None
        key_id, key = self._issue_key(min(duration, self.sts_duration))
        assert key.expires_at is not None
        role_name = params["RoleArn"].rpartition("/")[2]
        return {
            "Credentials": {
                "AccessKeyId": key_id,
                "AccessKeySecret": key.secret,
                "SecurityToken": key.token,
                "Expiration": iso_time(key.expires_at),
            },
            "AssumedRoleUser": {
                "Arn": f"{params['RoleArn']}/{params['RoleSessionName']}",
                "AssumedRoleId": f"3{random_id(16)}:{params['RoleSessionName']}",
            },
            "OIDCTokenInfo": {
                "Subject": "system:serviceaccount:kube-system:cluster-autoscaler",
                "Issuer": "https://oidc-ack.emulated",
                "ClientIds": "sts.aliyuncs.com",
            },
            "SourceIdentity": role_name,
        }

    def _metadata_roles(self, req: Request) -> Response:
        self._note(req.path)
        if not self.metadata_role:
            return Response(404, b"", {"Content-Type": "text/plain"})
        return Response(200, self.metadata_role.encode(), {"Content-Type": "text/plain"})

    def _metadata_credentials(self, req: Request) -> Response:
        self._note(req.path)
        if not self.metadata_role or req.params["role"] != self.metadata_role:
            return Response(404, b"", {"Content-Type": "text/plain"})
        key_id, key = self._issue_key(self.sts_duration)
        assert key.expires_at is not None
        return Response(
            200,
            {
                "AccessKeyId": key_id,
                "AccessKeySecret": key.secret,
                "SecurityToken": key.token,
                "Expiration": iso_time(key.expires_at),
                "LastUpdated": iso_time(time.time()),
                "Code": "Success",
            },
        )

    def _metadata_region(self, req: Request) -> Response:
        self._note(req.path)
        return Response(200, self.region.encode(), {"Content-Type": "text/plain"})
