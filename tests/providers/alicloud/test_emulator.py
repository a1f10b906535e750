"""The emulator's own rules, over real HTTP: signatures (V1 as the in-tree Go SDK sends it, nonce
reuse, clock skew), the 2014-08-28 shapes, routing errors, ESS semantics and persistence."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import requests

from cloudprovider_grpc.emulators import FaultPlan
from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator
from cloudprovider_grpc.emulators.alicloud import ess as emulator_ess
from cloudprovider_grpc.formats import acs_signature as signing
from tests.providers.alicloud.conftest import AK, GROUP_A, GROUP_B, REGION, SK, seed_groups
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


def v1(
    emulator: AliCloudEmulator,
    action: str,
    version: str = "2014-08-28",
    *,
    secret: str = SK,
    nonce: str | None = None,
    when: float | None = None,
    method: str = "GET",
    **params: str,
) -> requests.Response:
    """A request shaped like the in-tree Go SDK's: every parameter in the query, `SignatureType`
    present and empty, HMAC-SHA1."""
    query = {
        "Action": action,
        "Version": version,
        "Format": "JSON",
        "RegionId": REGION,
        "AccessKeyId": AK,
        "SignatureMethod": "HMAC-SHA1",
        "SignatureVersion": "1.0",
        "SignatureType": "",
        "SignatureNonce": nonce or uuid.uuid4().hex,
        "Timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when or time.time())),
        **params,
    }
    query["Signature"] = signing.v1_signature(secret, signing.v1_string_to_sign(method, query.items()))
    raw = "&".join(f"{signing.percent_encode(k)}={signing.percent_encode(v)}" for k, v in query.items())
    return requests.request(method, f"{emulator.base_url}?{raw}", timeout=5)


def test_go_style_v1_request_and_the_2014_shapes(emulator: AliCloudEmulator) -> None:
    got = v1(emulator, "DescribeScalingGroups", **{"ScalingGroupId.1": GROUP_A})
    assert got.status_code == 200, got.text
    groups = got.json()["ScalingGroups"]["ScalingGroup"]
    assert [g["ScalingGroupId"] for g in groups] == [GROUP_A]
    assert groups[0]["ActiveCapacity"] == 2 and groups[0]["TotalCapacity"] == 2
    insts = v1(emulator, "DescribeScalingInstances", ScalingGroupId=GROUP_A, PageSize="10").json()
    assert len(insts["ScalingInstances"]["ScalingInstance"]) == insts["TotalCount"] == 2
    configs = v1(emulator, "DescribeScalingConfigurations", ScalingGroupId=GROUP_A).json()
    config = configs["ScalingConfigurations"]["ScalingConfiguration"][0]
    assert config["Tags"] == {"Tag": [{"Key": "pool", "Value": "a"}]}
    removed = v1(
        emulator,
        "RemoveInstances",
        method="POST",
        ScalingGroupId=GROUP_A,
        **{"InstanceId.1": insts["ScalingInstances"]["ScalingInstance"][0]["InstanceId"]},
    )
    assert removed.status_code == 200 and "IgnoredInstances" not in removed.json()


def test_scaling_activities_wrap_their_instance_lists_in_the_2014_api(emulator: AliCloudEmulator) -> None:
    ids = [i["InstanceId"] for i in emulator.group_instances(GROUP_A)]
    removed = v1(
        emulator, "RemoveInstances", method="POST", ScalingGroupId=GROUP_A, **{"InstanceId.1": ids[0]}
    )
    assert removed.status_code == 200, removed.text
    old = v1(emulator, "DescribeScalingActivities", ScalingGroupId=GROUP_A).json()
    activity = old["ScalingActivities"]["ScalingActivity"][0]
    assert activity["DestroyedInstances"] == {"DestroyedInstance": [ids[0]]}
    assert activity["CreatedInstances"] == {"CreatedInstance": []}
    new = v1(emulator, "DescribeScalingActivities", "2022-02-22", ScalingGroupId=GROUP_A).json()
    activity = new["ScalingActivities"][0]
    assert activity["DestroyedInstances"] == [ids[0]] and activity["CreatedInstances"] == []


def test_signature_nonce_and_timestamp_rules(emulator: AliCloudEmulator) -> None:
    nonce = uuid.uuid4().hex
    assert v1(emulator, "DescribeScalingGroups", nonce=nonce).status_code == 200
    again = v1(emulator, "DescribeScalingGroups", nonce=nonce)
    assert (again.status_code, again.json()["Code"]) == (400, "SignatureNonceUsed")
    old = v1(emulator, "DescribeScalingGroups", when=time.time() - 16 * 60)
    assert (old.status_code, old.json()["Code"]) == (400, "InvalidTimeStamp.Expired")
    assert v1(emulator, "DescribeScalingGroups", when=time.time() - 14 * 60).status_code == 200
    bad = v1(emulator, "DescribeScalingGroups", secret="nope")
    body = bad.json()
    assert (bad.status_code, body["Code"]) == (400, "SignatureDoesNotMatch")
    assert body["Message"].startswith(
        "Specified signature is not matched with our calculation. server string to sign is:"
    )
    assert set(body) >= {"RequestId", "HostId", "Code", "Message", "Recommend"}
    unsigned = requests.get(f"{emulator.base_url}?Action=DescribeScalingGroups&Version=2022-02-22", timeout=5)
    assert unsigned.json()["Code"] == "IncompleteSignature"
    unknown = v1(emulator, "DescribeScalingGroups", secret=SK, AccessKeyId="LTAI-unknown")
    assert (unknown.status_code, unknown.json()["Code"]) == (404, "InvalidAccessKeyId.NotFound")


def test_keep_history_also_bounds_actions_and_nonces(emulator: AliCloudEmulator) -> None:
    """As inside `serve --emulate`: a replay within the kept history is still refused, an older one
    is no longer remembered."""
    emulator.keep_history(4)
    nonces = [uuid.uuid4().hex for _ in range(6)]
    for nonce in nonces:
        assert v1(emulator, "DescribeScalingGroups", nonce=nonce).status_code == 200
    assert emulator.actions() == ["DescribeScalingGroups"] * 4 and len(emulator.request_log()) == 4
    again = v1(emulator, "DescribeScalingGroups", nonce=nonces[-1])
    assert (again.status_code, again.json()["Code"]) == (400, "SignatureNonceUsed")
    assert v1(emulator, "DescribeScalingGroups", nonce=nonces[0]).status_code == 200


def test_routing_errors(emulator: AliCloudEmulator) -> None:
    nope = v1(emulator, "DescribeNothing")
    assert (nope.status_code, nope.json()["Code"]) == (404, "InvalidAction.NotFound")
    version = v1(emulator, "DescribeScalingGroups", version="2099-01-01")
    assert (version.status_code, version.json()["Code"]) == (400, "InvalidVersion")
    assert v1(emulator, "DescribeInstanceTypes", version="2014-05-26").status_code == 200


def test_scaling_rules_clamp_minimum_and_batch_size(
    emulator: AliCloudEmulator, emu_clock: ManualClock
) -> None:
    up = v1(
        emulator,
        "ScaleWithAdjustment",
        "2022-02-22",
        method="POST",
        ScalingGroupId=GROUP_A,
        AdjustmentType="TotalCapacity",
        AdjustmentValue="100",
    )
    assert up.status_code == 200 and emulator.group_record(GROUP_A)["DesiredCapacity"] == 30  # clamped to max
    record = emulator.group_record(GROUP_A)
    assert (record["PendingCapacity"], record["ActiveCapacity"], record["TotalCapacity"]) == (28, 2, 30)
    emu_clock.advance(31)
    record = emulator.group_record(GROUP_A)
    assert (record["PendingCapacity"], record["ActiveCapacity"]) == (0, 30)
    emulator.groups[GROUP_A]["MinSize"] = 29
    ids = [i["InstanceId"] for i in emulator.group_instances(GROUP_A)]
    too_many = v1(
        emulator,
        "RemoveInstances",
        "2022-02-22",
        method="POST",
        ScalingGroupId=GROUP_A,
        **{f"InstanceIds.{n}": i for n, i in enumerate(ids[:21], 1)},
    )
    assert (too_many.status_code, too_many.json()["Code"]) == (400, "InvalidParameter")
    below = v1(
        emulator,
        "RemoveInstances",
        "2022-02-22",
        method="POST",
        ScalingGroupId=GROUP_A,
        **{"InstanceIds.1": ids[0], "InstanceIds.2": ids[1]},
    )
    assert (below.status_code, below.json()["Code"]) == (400, "IncorrectCapacity.MinSize")
    strict = v1(
        emulator,
        "RemoveInstances",
        "2022-02-22",
        method="POST",
        ScalingGroupId=GROUP_B,
        **{"InstanceIds.1": ids[0]},
    )
    assert (strict.status_code, strict.json()["Code"]) == (404, "InvalidInstanceId.NotFound")
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 30


def test_finished_activities_and_client_tokens_are_capped(
    emulator: AliCloudEmulator, emu_clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running emulator keeps a group's newest finished activities (and the one in progress)
    and the newest ClientToken answers, not one of each for every scale it ever saw."""
    monkeypatch.setattr(emulator_ess, "ACTIVITIES_KEPT", 3)
    monkeypatch.setattr(emulator_ess, "CLIENT_TOKENS_KEPT", 2)

    def scale(size: int, token: str) -> str:
        got = v1(
            emulator,
            "ScaleWithAdjustment",
            "2022-02-22",
            method="POST",
            ScalingGroupId=GROUP_A,
            AdjustmentType="TotalCapacity",
            AdjustmentValue=str(size),
            ClientToken=token,
        )
        assert got.status_code == 200 and "ScalingActivityId" in got.json(), got.text
        return str(got.json()["ScalingActivityId"])

    started = []
    for n in range(6):
        started.append(scale(3 + n % 2, f"token-{n}"))
        emu_clock.advance(60)  # every activity finishes before the next one starts
    newest_first = started[::-1]
    assert [a["ScalingActivityId"] for a in emulator.activity_records(GROUP_A)] == newest_first[:4]
    assert scale(4, "token-5") == started[5]  # a retry still gets its first answer
    assert scale(3, "token-0") not in started  # forgotten: served as a new request


def test_throttling_is_400_with_retry_after_in_milliseconds(emulator: AliCloudEmulator) -> None:
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("throttle",), retry_after="3"))
    got = v1(emulator, "DescribeScalingGroups")
    assert (got.status_code, got.json()["Code"], got.headers["x-acs-retry-after"]) == (
        400,
        "Throttling.User",
        "3000",
    )
    emulator.set_faults(FaultPlan(rate=1.0, kinds=("error",), error_statuses=(503,)))
    down = v1(emulator, "DescribeScalingGroups")
    assert (down.status_code, down.json()["Code"]) == (503, "ServiceUnavailable")


def test_state_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "alicloud-state.json"
    first = AliCloudEmulator(access_keys={AK: SK}, state_file=state)
    seed_groups(first)
    with first:
        v1(
            first,
            "ScaleWithAdjustment",
            "2022-02-22",
            method="POST",
            ScalingGroupId=GROUP_B,
            AdjustmentType="TotalCapacity",
            AdjustmentValue="2",
        )
        before = sorted(i["InstanceId"] for i in first.group_instances(GROUP_B))
    second = AliCloudEmulator(access_keys={AK: SK}, state_file=state)
    with second:
        assert sorted(i["InstanceId"] for i in second.group_instances(GROUP_B)) == before
        assert second.group_record(GROUP_B)["DesiredCapacity"] == 2
        assert v1(second, "DescribeScalingGroups").json()["TotalCount"] == 3


def test_a_ram_deny_on_one_group_refuses_only_actions_naming_it(emulator: AliCloudEmulator) -> None:
    emulator.denied_groups.add(GROUP_A)
    denied = v1(emulator, "DescribeScalingInstances", ScalingGroupId=GROUP_A)
    assert denied.status_code == 403 and denied.json()["Code"] == "Forbidden.Unauthorized"
    scale = v1(emulator, "ScaleWithAdjustment", method="POST", ScalingGroupId=GROUP_A,
               AdjustmentType="TotalCapacity", AdjustmentValue="3")  # fmt: skip
    assert scale.status_code == 403
    assert emulator.group_record(GROUP_A)["DesiredCapacity"] == 2
    assert v1(emulator, "DescribeScalingInstances", ScalingGroupId=GROUP_B).status_code == 200
    listed = v1(
        emulator, "DescribeScalingGroups", **{"ScalingGroupId.1": GROUP_A, "ScalingGroupId.2": GROUP_B}
    )
    assert listed.status_code == 200  # a list call, authorised on `*`
