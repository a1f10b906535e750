"""The signing client: signatures equal the vendor SDK's, errors are precise, retries are safe."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from alibabacloud_tea_openapi.utils import Utils as TeaUtils

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass
from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.formats import acs_signature as signing
from cloudprovider_grpc.providers.alicloud import AliClient
from cloudprovider_grpc.providers.alicloud.client import default_endpoint, flatten
from cloudprovider_grpc.providers.alicloud.credentials import StaticCredentials
from cloudprovider_grpc.providers.alicloud.errors import ApiError
from tests.providers.alicloud.conftest import AK, GROUP_A, REGION, SK

pytestmark = pytest.mark.integration

QUERY = {"RegionId": REGION, "ScalingGroupIds.1": "asg-1", "Note": "a b*c~d/é"}
HEADERS = {
    "host": "ess.aliyuncs.com",
    "x-acs-action": "DescribeScalingGroups",
    "x-acs-version": "2022-02-22",
    "x-acs-date": "2026-11-23T03:00:00Z",
    "x-acs-signature-nonce": "3f2a",
    "x-acs-content-sha256": signing.EMPTY_SHA256,
}


def test_v3_signature_equals_the_vendor_sdk() -> None:
    sdk = TeaUtils.get_authorization(
        SimpleNamespace(pathname="/", method="POST", query=QUERY, headers=HEADERS),
        "ACS3-HMAC-SHA256",
        signing.EMPTY_SHA256,
        AK,
        SK,
    )
    sts = signing.v3_string_to_sign("POST", "/", QUERY.items(), HEADERS, HEADERS.keys(), signing.EMPTY_SHA256)
    ours = signing.V3Authorization(AK, tuple(sorted(HEADERS)), signing.v3_signature(SK, sts)).header()
    assert ours == sdk
    assert signing.V3Authorization.parse(ours) == signing.V3Authorization(
        AK, tuple(sorted(HEADERS)), signing.v3_signature(SK, sts)
    )


def test_v1_signature_equals_the_vendor_sdk() -> None:
    params = {**QUERY, "AccessKeyId": AK, "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0"}
    sdk = TeaUtils.get_rpcsignature(params, "GET", SK)
    assert signing.v1_signature(SK, signing.v1_string_to_sign("GET", params.items())) == sdk


def test_parameters_flatten_like_the_sdk() -> None:
    assert flatten({"InstanceIds": ["i-1", "i-2"], "Sync": True, "Empty": "", "None": None, "N": 3}) == {
        "InstanceIds.1": "i-1",
        "InstanceIds.2": "i-2",
        "Sync": "true",
        "N": "3",
    }


def test_default_endpoints() -> None:
    assert default_endpoint("ess", "cn-hangzhou") == "https://ess.aliyuncs.com/"
    assert default_endpoint("ess", "eu-central-1") == "https://ess.eu-central-1.aliyuncs.com/"
    assert default_endpoint("ecs", "cn-hangzhou") == "https://ecs-cn-hangzhou.aliyuncs.com/"
    assert default_endpoint("ecs", "ap-southeast-5") == "https://ecs.ap-southeast-5.aliyuncs.com/"


def client(emulator: AliCloudEmulator, secret: str = SK, **kw) -> tuple[AliClient, list[float]]:
    slept: list[float] = []
    c = AliClient(
        StaticCredentials(AK, secret),
        region=REGION,
        ess_url=emulator.base_url,
        ecs_url=emulator.base_url,
        sleep=slept.append,
        max_elapsed=30.0,
        **kw,
    )
    return c, slept


def test_instances_are_paged_by_one_hundred(emulator: AliCloudEmulator) -> None:
    emulator.add_group({"ScalingGroupId": "asg-bp1big", "MaxSize": 500, "DesiredCapacity": 250})
    c, _ = client(emulator)
    emulator.clear_log()
    instances = c.describe_scaling_instances("asg-bp1big")
    assert len(instances) == 250 and len({i["InstanceId"] for i in instances}) == 250
    calls = [e.query for e in emulator.request_log()]
    assert [(q["PageNumber"], q["PageSize"]) for q in calls] == [
        (["1"], ["100"]),
        (["2"], ["100"]),
        (["3"], ["100"]),
    ]
    assert {e.method for e in emulator.request_log()} == {"GET"}


def test_a_bad_signature_is_refused_and_the_error_carries_no_secret(emulator: AliCloudEmulator) -> None:
    c, _ = client(emulator, secret="wrong-secret-value")
    with pytest.raises(CloudError) as err:
        c.describe_scaling_groups([GROUP_A])
    assert err.value.code == "SignatureDoesNotMatch" and not err.value.transient
    assert "wrong-secret-value" not in str(err.value) and "string to sign" not in str(err.value)


def test_throttling_is_retried_after_x_acs_retry_after(emulator: AliCloudEmulator) -> None:
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("throttle",), retry_after="2"))
    c, slept = client(emulator, retries=2)
    with pytest.raises(CloudError) as err:
        c.scale_with_adjustment(GROUP_A, 3, {})
    assert err.value.code == "Throttling.User" and err.value.transient
    assert slept == [2.0, 2.0]  # the server's 2000 ms, twice, then the error
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 2  # nothing was processed
    emulator.set_faults(FaultPlan(rate=0.5, kinds=("throttle",), retry_after="1", seed=3))
    c.scale_with_adjustment(GROUP_A, 3, {})  # gets through between throttled attempts
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 3


def test_server_errors_are_retried_for_reads_only(emulator: AliCloudEmulator) -> None:
    c, slept = client(emulator, retries=3)
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("error",), error_statuses=(503,)))
    with pytest.raises(CloudError) as err:
        c.describe_scaling_groups([GROUP_A])
    assert err.value.code == "ServiceUnavailable" and err.value.transient and len(slept) == 3
    emulator.clear_log()
    with pytest.raises(CloudError) as err:
        c.scale_with_adjustment(GROUP_A, 4, {})
    assert err.value.transient and len(emulator.request_log()) == 1  # a change is never re-sent


def test_error_classes_from_codes() -> None:
    stock = ApiError(400, "OperationDenied.NoStock", "out of stock").to_cloud_error("x")
    assert stock.error_class == ErrorClass.OUT_OF_RESOURCES and not stock.transient
    quota = ApiError(400, "QuotaExceed.ElasticQuota", "quota").to_cloud_error("x")
    assert quota.error_class == ErrorClass.OUT_OF_RESOURCES
    busy = ApiError(400, "ScalingActivityInProgress", "busy").to_cloud_error("x")
    assert busy.transient and busy.error_class == ErrorClass.OTHER
    assert (
        ApiError.from_reply(
            400, b'{"Code":"Throttling.Api","Message":"m"}', {"x-acs-retry-after": "1500"}
        ).retry_after
        == 1.5
    )
    odd = ApiError.from_reply(502, b"<html>bad gateway</html>", {})
    assert (odd.code, odd.transient) == ("HTTP502", True)


def test_scaling_activity_in_progress_is_transient_and_not_retried_inline(emulator: AliCloudEmulator) -> None:
    emulator.add_group({"ScalingGroupId": "asg-bp1plain", "EnableDesiredCapacity": False, "MinSize": 0})
    c, slept = client(emulator)
    c.scale_with_adjustment("asg-bp1plain", 2, {})
    with pytest.raises(CloudError) as err:
        c.scale_with_adjustment("asg-bp1plain", 3, {})
    assert err.value.code == "ScalingActivityInProgress" and err.value.transient and slept == []


def test_a_ram_denial_is_permanent_and_named(emulator: AliCloudEmulator) -> None:
    emulator.denied_actions.add("ScaleWithAdjustment")
    c, slept = client(emulator)
    with pytest.raises(CloudError) as err:
        c.scale_with_adjustment(GROUP_A, 3, {})
    assert (err.value.code, err.value.status, err.value.transient) == ("Forbidden.Unauthorized", 403, False)
    assert "ScaleWithAdjustment" in str(err.value) and slept == []
