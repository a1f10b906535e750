"""The vendor's own Python SDK drives the emulator for every action the backend uses, with both
signature versions the emulator accepts (V3 ACS3-HMAC-SHA256, the SDK default, and V1 HMAC-SHA1 via
`signature_algorithm="v2"`). A request the real client would sign or shape differently, or an answer
it could not decode, fails here. The SDKs are test dependencies only."""

from __future__ import annotations

import pytest
from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_ess20220222 import models as ess_models
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_sts20150401 import models as sts_models
from alibabacloud_sts20150401.client import Client as StsClient
from alibabacloud_tea_openapi import exceptions as tea_exceptions
from alibabacloud_tea_openapi.models import Config

from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from tests.providers.alicloud.conftest import AK, GROUP_A, OIDC_TOKEN, PROVIDER_ARN, REGION, ROLE_ARN, SK
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration

SIGNATURES = ["v3", "v2"]  # v2 is the SDK's name for the V1 HMAC-SHA1 RPC signature


def config(emulator: AliCloudEmulator, signature: str, **kw: str) -> Config:
    cfg = Config(
        access_key_id=kw.get("ak", AK),
        access_key_secret=kw.get("sk", SK),
        security_token=kw.get("token"),
        endpoint=emulator.address,
        protocol="http",
        region_id=REGION,
    )
    if signature == "v2":
        cfg.signature_algorithm = "v2"
    return cfg


@pytest.mark.parametrize("signature", SIGNATURES)
def test_every_ess_action_through_the_official_sdk(
    emulator: AliCloudEmulator, emu_clock: ManualClock, signature: str
) -> None:
    ess = EssClient(config(emulator, signature))
    groups = ess.describe_scaling_groups(
        ess_models.DescribeScalingGroupsRequest(region_id=REGION, scaling_group_ids=[GROUP_A], page_size=50)
    ).body
    assert [g.scaling_group_id for g in groups.scaling_groups] == [GROUP_A]
    group = groups.scaling_groups[0]
    assert (group.desired_capacity, group.active_capacity, group.total_capacity) == (2, 2, 2)
    assert group.enable_desired_capacity is True and group.lifecycle_state == "Active"

    configs = ess.describe_scaling_configurations(
        ess_models.DescribeScalingConfigurationsRequest(
            region_id=REGION,
            scaling_group_id=GROUP_A,
            scaling_configuration_ids=[group.active_scaling_configuration_id],
        )
    ).body.scaling_configurations
    assert configs[0].instance_type == "ecs.g7.xlarge"
    assert [(t.key, t.value) for t in configs[0].tags] == [("pool", "a")]

    scaled = ess.scale_with_adjustment(
        ess_models.ScaleWithAdjustmentRequest(
            scaling_group_id=GROUP_A,
            adjustment_type="TotalCapacity",
            adjustment_value=5,
            sync_activity=True,
            activity_metadata='{"cluster-autoscaler/alicloud/managed":"true"}',
        )
    ).body
    assert scaled.scaling_activity_id and scaled.activity_type == "ScalingActivity"

    page1 = ess.describe_scaling_instances(
        ess_models.DescribeScalingInstancesRequest(
            region_id=REGION, scaling_group_id=GROUP_A, page_number=1, page_size=3
        )
    ).body
    page2 = ess.describe_scaling_instances(
        ess_models.DescribeScalingInstancesRequest(
            region_id=REGION, scaling_group_id=GROUP_A, page_number=2, page_size=3
        )
    ).body
    instances = page1.scaling_instances + page2.scaling_instances
    assert page1.total_count == 5 and len(instances) == 5
    assert sorted(i.lifecycle_state for i in instances) == ["InService"] * 2 + ["Pending"] * 3
    assert all(i.instance_id.startswith("i-") for i in instances)

    activities = ess.describe_scaling_activities(
        ess_models.DescribeScalingActivitiesRequest(
            region_id=REGION, scaling_group_id=GROUP_A, scaling_activity_ids=[scaled.scaling_activity_id]
        )
    ).body.scaling_activities
    assert [(a.scaling_activity_id, a.status_code) for a in activities] == [
        (scaled.scaling_activity_id, "InProgress")
    ]
    assert activities[0].activity_metadata == '{"cluster-autoscaler/alicloud/managed":"true"}'

    emu_clock.advance(31)  # the new instances are in service, the activity has finished
    in_service = [i.instance_id for i in instances if i.lifecycle_state == "InService"]
    removed = ess.remove_instances(
        ess_models.RemoveInstancesRequest(
            region_id=REGION,
            scaling_group_id=GROUP_A,
            instance_ids=[in_service[0], "i-bp1doesnotexist0000"],
            decrease_desired_capacity=True,
            ignore_invalid_instance=True,
            remove_policy="release",
            client_token="oracle-remove-1",
        )
    ).body
    assert removed.scaling_activity_id
    assert [(i.instance_id, i.code) for i in removed.ignored_instances] == [
        ("i-bp1doesnotexist0000", "InvalidInstanceId.NotFound")
    ]
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 4


@pytest.mark.parametrize("signature", SIGNATURES)
def test_describe_instance_types_through_the_official_sdk(emulator: AliCloudEmulator, signature: str) -> None:
    ecs = EcsClient(config(emulator, signature))
    body = ecs.describe_instance_types(
        ecs_models.DescribeInstanceTypesRequest(
            instance_types=["ecs.gn7i-c8g1.2xlarge", "ecs.g8y.xlarge"], max_results=1
        )
    ).body
    assert [t.instance_type_id for t in body.instance_types.instance_type] == ["ecs.g8y.xlarge"]
    nxt = ecs.describe_instance_types(
        ecs_models.DescribeInstanceTypesRequest(
            instance_types=["ecs.gn7i-c8g1.2xlarge", "ecs.g8y.xlarge"],
            max_results=1,
            next_token=body.next_token,
        )
    ).body
    gpu = nxt.instance_types.instance_type[0]
    assert (gpu.instance_type_id, gpu.cpu_core_count, gpu.memory_size, gpu.gpuamount, gpu.gpuspec) == (
        "ecs.gn7i-c8g1.2xlarge",
        8,
        30.0,
        1,
        "NVIDIA A10",
    )
    assert not nxt.next_token


@pytest.mark.parametrize("signature", SIGNATURES)
def test_sts_assume_role_with_oidc_and_the_temporary_key(emulator: AliCloudEmulator, signature: str) -> None:
    sts = StsClient(config(emulator, signature))
    creds = sts.assume_role_with_oidc(
        sts_models.AssumeRoleWithOIDCRequest(
            role_arn=ROLE_ARN,
            oidcprovider_arn=PROVIDER_ARN,
            oidctoken=OIDC_TOKEN,
            role_session_name="cluster-autoscaler",
        )
    ).body.credentials
    assert creds.access_key_id.startswith("STS.") and creds.security_token and creds.expiration.endswith("Z")
    ess = EssClient(
        config(
            emulator,
            signature,
            ak=creds.access_key_id,
            sk=creds.access_key_secret,
            token=creds.security_token,
        )
    )
    got = ess.describe_scaling_groups(ess_models.DescribeScalingGroupsRequest(region_id=REGION)).body
    assert got.total_count == 3
    # without its token the temporary key is refused
    bare = EssClient(config(emulator, signature, ak=creds.access_key_id, sk=creds.access_key_secret))
    with pytest.raises(tea_exceptions.ClientException) as err:
        bare.describe_scaling_groups(ess_models.DescribeScalingGroupsRequest(region_id=REGION))
    assert err.value.code == "InvalidSecurityToken.MismatchWithAccessKey"


@pytest.mark.parametrize("signature", SIGNATURES)
def test_errors_reach_the_sdk_as_its_own_exceptions(emulator: AliCloudEmulator, signature: str) -> None:
    wrong = EssClient(config(emulator, signature, sk="not-the-secret"))
    with pytest.raises(tea_exceptions.ClientException) as err:
        wrong.describe_scaling_groups(ess_models.DescribeScalingGroupsRequest(region_id=REGION))
    assert err.value.code == "SignatureDoesNotMatch" and err.value.status_code == 400
    ess = EssClient(config(emulator, signature))
    with pytest.raises(tea_exceptions.ClientException) as err:
        ess.scale_with_adjustment(
            ess_models.ScaleWithAdjustmentRequest(
                scaling_group_id="asg-bp1nosuchgroup00000",
                adjustment_type="TotalCapacity",
                adjustment_value=1,
            )
        )
    assert err.value.code == "InvalidScalingGroupId.NotFound" and err.value.status_code == 404
    emulator.rate_limit_per_s = 0.001
    emulator.reset_rate_limits()
    ess.describe_scaling_groups(ess_models.DescribeScalingGroupsRequest(region_id=REGION))  # the one token
    with pytest.raises(tea_exceptions.ThrottlingException) as throttled:
        ess.describe_scaling_groups(ess_models.DescribeScalingGroupsRequest(region_id=REGION))
    assert (
        throttled.value.code == "Throttling.User"
        and throttled.value.retry_after
        and throttled.value.retry_after > 0
    )


LAUNCH_DATA = {
    "InstanceType": "ecs.g7.2xlarge",
    "SystemDisk": {"Size": 80},
    "Tags": {"InstanceTag": [{"Key": "pool", "Value": "lt"}]},
}


@pytest.mark.parametrize("signature", SIGNATURES)
def test_launch_template_versions_through_the_official_sdk(
    emulator: AliCloudEmulator, signature: str
) -> None:
    emulator.add_launch_template(
        "lt-bp1oracle000000001", {"InstanceType": "ecs.g7.large"}, LAUNCH_DATA, default=1
    )
    ecs = EcsClient(config(emulator, signature))
    default = ecs.describe_launch_template_versions(
        ecs_models.DescribeLaunchTemplateVersionsRequest(
            region_id=REGION,
            launch_template_id="lt-bp1oracle000000001",
            default_version=True,
            detail_flag=True,
        )
    ).body.launch_template_version_sets.launch_template_version_set
    assert [(v.version_number, v.launch_template_data.instance_type) for v in default] == [
        (1, "ecs.g7.large")
    ]
    second = ecs.describe_launch_template_versions(
        ecs_models.DescribeLaunchTemplateVersionsRequest(
            region_id=REGION,
            launch_template_id="lt-bp1oracle000000001",
            launch_template_version=[2],
            detail_flag=True,
        )
    ).body.launch_template_version_sets.launch_template_version_set[0]
    data = second.launch_template_data
    assert (data.instance_type, data.system_disk.size) == ("ecs.g7.2xlarge", 80)
    assert [(t.key, t.value) for t in data.tags.instance_tag] == [("pool", "lt")]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_vpc_describe_vswitches_through_the_generic_openapi_client(
    emulator: AliCloudEmulator, signature: str
) -> None:
    """No VPC SDK is installed: the vendor's generic OpenAPI client (the one every product SDK wraps)
    sends the RPC call with the same signing and decoding."""
    from alibabacloud_tea_openapi import utils_models
    from alibabacloud_tea_openapi.client import Client as OpenApiClient
    from darabonba.runtime import RuntimeOptions

    client = OpenApiClient(config(emulator, signature))
    params = utils_models.Params(
        action="DescribeVSwitches",
        version="2016-04-28",
        protocol="HTTP",
        pathname="/",
        method="POST",
        auth_type="AK",
        style="RPC",
        req_body_type="formData",
        body_type="json",
    )
    request = utils_models.OpenApiRequest(query={"RegionId": REGION, "VSwitchId": "vsw-cn-hangzhou-i"})
    body = client.call_api(params, request, RuntimeOptions())["body"]
    assert [(v["VSwitchId"], v["ZoneId"]) for v in body["VSwitches"]["VSwitch"]] == [
        ("vsw-cn-hangzhou-i", "cn-hangzhou-i")
    ]
