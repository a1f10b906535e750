"""All 15 RPCs and every error path, over a real loopback port, in plaintext and under mutual TLS.

The sim backend runs on a manual clock with inline workers, so each step is deterministic: an
IncreaseSize is visible at once as placeholders, the creates run at the next Refresh, and the
machines turn running when the clock passes the provisioning delay. A backend that lacks the
optional RPCs, has a bug or describes an invalid template is in test_rpcs_backend_gaps.py.
"""

from __future__ import annotations

import datetime as dt

import grpc
import pytest

from cloudprovider_grpc.k8s.node import decode_node
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.rpc_calls import code_of, make_pod, ts
from tests.support.servers import ManualClock, channel, sim_server, stub

pytestmark = pytest.mark.integration

CREATING = pb.InstanceStatus.instanceCreating
RUNNING = pb.InstanceStatus.instanceRunning
DELETING = pb.InstanceStatus.instanceDeleting

OPTIONS = {
    "provisioning_delay": 60,
    "deletion_delay": 10,
    "groups": [
        {
            "id": "general",
            "min_size": 1,
            "max_size": 4,
            "initial_size": 2,
            "instance_type": "sim-4x16",
            "capacity": {"cpu": "4", "memory": "16Gi"},
            "reserved": {"cpu": "100m", "memory": "512Mi"},
            "price_per_hour": 0.2,
        },
        {
            "id": "gpu",
            "min_size": 0,
            "max_size": 2,
            "instance_type": "sim-gpu",
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "gpu": {"count": 2, "type": "nvidia-tesla-t4"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            "price_per_hour": 2.0,
            "options": {"scale_down_unneeded_time": 300.0, "scale_down_utilization_threshold": 0.3},
        },
        {"id": "empty", "min_size": 0, "max_size": 3, "fail": {"stockout_after": 0}},
    ],
}


def states(s, gid: str) -> dict[str, int]:
    return {
        i.id: i.status.instanceState for i in s.NodeGroupNodes(pb.NodeGroupNodesRequest(id=gid)).instances
    }


@pytest.fixture(params=["plaintext", "mtls", "plaintext-python", "mtls-python"])
def env(request, pki, clock: ManualClock):
    """Each RPC test over plaintext and mTLS, through the compiled front (when built) and with Python
    serving the port alone (`--front off`), so both paths stay covered."""
    secure = request.param.startswith("mtls")
    front = "off" if request.param.endswith("-python") else "auto"
    with sim_server(OPTIONS, clock=clock, pki=pki if secure else None, front=front) as handle:
        ch = channel(handle, pki if secure else None)
        yield stub(ch), clock, handle
        ch.close()


def test_cloud_provider_rpcs(env) -> None:
    s, _, _ = env
    groups = s.NodeGroups(pb.NodeGroupsRequest(), timeout=5).nodeGroups
    assert [(g.id, g.minSize, g.maxSize) for g in groups] == [
        ("general", 1, 4),
        ("gpu", 0, 2),
        ("empty", 0, 3),
    ]
    assert "general" in groups[0].debug

    member = next(iter(states(s, "general")))
    assert member.startswith("sim://general/")
    assert (
        s.NodeGroupForNode(
            pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID=member))
        ).nodeGroup.id
        == "general"
    )
    # a node of no group and a control-plane node: an empty NodeGroup, not an error
    assert (
        s.NodeGroupForNode(
            pb.NodeGroupForNodeRequest(node=pb.ExternalGrpcNode(providerID="sim://other/1"))
        ).nodeGroup.id
        == ""
    )
    cp = pb.ExternalGrpcNode(providerID=member, labels={"node-role.kubernetes.io/control-plane": ""})
    assert s.NodeGroupForNode(pb.NodeGroupForNodeRequest(node=cp)).nodeGroup.id == ""

    assert s.GPULabel(pb.GPULabelRequest()).label == "cloudprovider-grpc.io/gpu"
    assert list(s.GetAvailableGPUTypes(pb.GetAvailableGPUTypesRequest()).gpuTypes) == ["nvidia-tesla-t4"]
    s.Refresh(pb.RefreshRequest(), timeout=5)
    s.Cleanup(pb.CleanupRequest(), timeout=5)

    # pricing: 2 hours of a general node at 0.2/h; new and legacy time fields
    node = pb.ExternalGrpcNode(providerID=member)
    assert s.PricingNodePrice(
        pb.PricingNodePriceRequest(node=node, startTimestamp=ts(0), endTimestamp=ts(7200))
    ).price == pytest.approx(0.4)
    assert s.PricingNodePrice(
        pb.PricingNodePriceRequest(node=node, startTime=ts(0), endTime=ts(3600))
    ).price == pytest.approx(0.2)
    # a template node CA built from our template is priced by its instance-type label
    tpl_node = pb.ExternalGrpcNode(
        name="template-node-for-gpu-123", labels={"node.kubernetes.io/instance-type": "sim-gpu"}
    )
    assert s.PricingNodePrice(
        pb.PricingNodePriceRequest(node=tpl_node, startTimestamp=ts(0), endTimestamp=ts(3600))
    ).price == pytest.approx(2.0)
    # pod: 1 cpu / 2Gi. general allocatable = 3.9 cpu, 15.5Gi -> dominant share 1/3.9; 0.2/h * 1/3.9 * 1 h
    pod = make_pod("1", "2Gi")
    want = 0.2 * (1 / 3.9)
    assert s.PricingPodPrice(
        pb.PricingPodPriceRequest(pod_bytes=pod, startTimestamp=ts(0), endTimestamp=ts(3600))
    ).price == pytest.approx(want)
    assert s.PricingPodPrice(
        pb.PricingPodPriceRequest(pod=pod, startTime=ts(0), endTime=ts(3600))
    ).price == pytest.approx(want)


def test_node_group_rpcs_lifecycle(env) -> None:
    s, clock, _ = env
    assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="general")).targetSize == 2
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="general", delta=2), timeout=5)
    assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="general")).targetSize == 4
    st = states(s, "general")
    pending = [i for i in st if "pending-" in i]
    assert len(pending) == 2 and all(st[i] == CREATING for i in pending)

    s.Refresh(pb.RefreshRequest())  # inline workers create the machines; they boot for 60 s
    st = states(s, "general")
    assert len(st) == 4 and not any("pending-" in i for i in st)
    assert sorted(st.values()) == [RUNNING, RUNNING, CREATING, CREATING]
    clock.advance(61)
    s.Refresh(pb.RefreshRequest())
    assert set(states(s, "general").values()) == {RUNNING}

    # DecreaseTargetSize may only drop requests the cloud has not fulfilled
    code, msg = code_of(
        s.NodeGroupDecreaseTargetSize, pb.NodeGroupDecreaseTargetSizeRequest(id="general", delta=-1)
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "below the 4 machines" in msg

    # delete one registered node and one CA-synthesised unregistered node (name == providerID)
    ids = sorted(states(s, "general"))
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(
            id="general",
            nodes=[
                pb.ExternalGrpcNode(providerID=ids[0], name="general-0"),
                pb.ExternalGrpcNode(providerID=ids[1], name=ids[1]),
            ],
        ),
        timeout=5,
    )
    assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="general")).targetSize == 2
    st = states(s, "general")
    assert st[ids[0]] == DELETING and st[ids[1]] == DELETING
    # idempotent: asking again for a machine already being deleted is fine
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(id="general", nodes=[pb.ExternalGrpcNode(providerID=ids[0])])
    )
    s.Refresh(pb.RefreshRequest())
    clock.advance(11)
    s.Refresh(pb.RefreshRequest())
    assert sorted(states(s, "general")) == ids[2:]
    # and for one that is gone
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(id="general", nodes=[pb.ExternalGrpcNode(providerID=ids[0])])
    )
    assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="general")).targetSize == 2

    # a request for a placeholder CA gave up on cancels it
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="general", delta=2))
    placeholders = [i for i in states(s, "general") if "pending-" in i]
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(
            id="general", nodes=[pb.ExternalGrpcNode(providerID=placeholders[0], name=placeholders[0])]
        )
    )
    s.NodeGroupDecreaseTargetSize(pb.NodeGroupDecreaseTargetSizeRequest(id="general", delta=-1))
    assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="general")).targetSize == 2
    s.Refresh(pb.RefreshRequest())
    assert len(states(s, "general")) == 2


def test_template_and_options(env) -> None:
    s, _, _ = env
    resp = s.NodeGroupTemplateNodeInfo(pb.NodeGroupTemplateNodeInfoRequest(id="gpu"))
    assert resp.nodeBytes and resp.nodeInfo == resp.nodeBytes  # legacy field carries the same bytes
    node = decode_node(resp.nodeBytes)
    cap, alloc = node.status.capacity, node.status.allocatable
    assert cap["cpu"].string == "8" and cap["memory"].string == "32Gi" and cap["nvidia.com/gpu"].string == "2"
    assert alloc["pods"].string == "110" and alloc["nvidia.com/gpu"].string == "2"
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "sim-gpu"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"

    # options: overrides for gpu, CA's defaults echoed for everything else, both duration encodings
    defaults = pb.NodeGroupAutoscalingOptions(
        scaleDownUtilizationThreshold=0.5,
        scaleDownGpuUtilizationThreshold=0.6,
        ignoreDaemonSetsUtilization=True,
    )
    defaults.scaleDownUnneededDuration.seconds = 600
    defaults.scaleDownUnreadyDuration.seconds = 1200
    defaults.MaxNodeProvisionDuration.seconds = 900
    # CA 1.35-1.36 (fields 8-10 alone) get no options: they would read a max node startup time of 0
    assert not s.NodeGroupGetOptions(
        pb.NodeGroupAutoscalingOptionsRequest(id="gpu", defaults=defaults)
    ).HasField("nodeGroupAutoscalingOptions")
    defaults.MaxNodeProvisionTime.duration = 900 * 10**9  # as CA 1.34.2 sends them
    got = s.NodeGroupGetOptions(
        pb.NodeGroupAutoscalingOptionsRequest(id="gpu", defaults=defaults)
    ).nodeGroupAutoscalingOptions
    assert got.scaleDownUtilizationThreshold == pytest.approx(0.3)
    assert got.scaleDownGpuUtilizationThreshold == pytest.approx(0.6)
    assert got.ignoreDaemonSetsUtilization is True
    assert got.scaleDownUnneededDuration.seconds == 300 and got.scaleDownUnneededTime.duration == 300 * 10**9
    assert got.scaleDownUnreadyDuration.seconds == 1200 and got.scaleDownUnreadyTime.duration == 1200 * 10**9
    assert got.MaxNodeProvisionDuration.seconds == 900 and got.MaxNodeProvisionTime.duration == 900 * 10**9
    # CA 1.29-1.34.1 send only the legacy nanosecond fields
    legacy = pb.NodeGroupAutoscalingOptions(scaleDownUtilizationThreshold=0.5)
    legacy.scaleDownUnneededTime.duration = 600 * 10**9
    legacy.scaleDownUnreadyTime.duration = 1200 * 10**9
    legacy.MaxNodeProvisionTime.duration = 900 * 10**9
    got = s.NodeGroupGetOptions(
        pb.NodeGroupAutoscalingOptionsRequest(id="gpu", defaults=legacy)
    ).nodeGroupAutoscalingOptions
    assert got.MaxNodeProvisionTime.duration == 900 * 10**9 and got.scaleDownUnreadyDuration.seconds == 1200


def test_error_paths(env) -> None:
    s, _, _ = env
    nf = grpc.StatusCode.NOT_FOUND
    for call, req in [
        (s.NodeGroupTargetSize, pb.NodeGroupTargetSizeRequest(id="nope")),
        (s.NodeGroupIncreaseSize, pb.NodeGroupIncreaseSizeRequest(id="nope", delta=1)),
        (s.NodeGroupDecreaseTargetSize, pb.NodeGroupDecreaseTargetSizeRequest(id="nope", delta=-1)),
        (
            s.NodeGroupDeleteNodes,
            pb.NodeGroupDeleteNodesRequest(id="nope", nodes=[pb.ExternalGrpcNode(providerID="x")]),
        ),
        (s.NodeGroupNodes, pb.NodeGroupNodesRequest(id="nope")),
        (s.NodeGroupTemplateNodeInfo, pb.NodeGroupTemplateNodeInfoRequest(id="nope")),
        (s.NodeGroupGetOptions, pb.NodeGroupAutoscalingOptionsRequest(id="nope")),
    ]:
        code, msg = code_of(call, req)
        assert (code, msg) == (nf, "node group 'nope' not found"), call

    ia, fp = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION
    assert code_of(s.NodeGroupIncreaseSize, pb.NodeGroupIncreaseSizeRequest(id="general", delta=0)) == (
        ia,
        "size increase must be positive, got delta=0",
    )
    assert code_of(
        s.NodeGroupDecreaseTargetSize, pb.NodeGroupDecreaseTargetSizeRequest(id="general", delta=1)
    ) == (ia, "size decrease must be negative, got delta=1")
    code, msg = code_of(s.NodeGroupIncreaseSize, pb.NodeGroupIncreaseSizeRequest(id="general", delta=3))
    assert code == fp and "size 5, above its max size 4" in msg
    # below min: general has 2 machines and min 1
    ids = sorted(states(s, "general"))
    code, msg = code_of(
        s.NodeGroupDeleteNodes,
        pb.NodeGroupDeleteNodesRequest(id="general", nodes=[pb.ExternalGrpcNode(providerID=i) for i in ids]),
    )
    assert code == fp and "size 0, below its min size 1" in msg
    # a node of another group or of none: INVALID_ARGUMENT naming it, nothing deleted
    code, msg = code_of(
        s.NodeGroupDeleteNodes,
        pb.NodeGroupDeleteNodesRequest(
            id="gpu", nodes=[pb.ExternalGrpcNode(providerID=ids[0], name="general-0")]
        ),
    )
    assert code == ia and "'general-0'" in msg and "belongs to node group 'general'" in msg
    code, msg = code_of(
        s.NodeGroupDeleteNodes,
        pb.NodeGroupDeleteNodesRequest(
            id="general",
            nodes=[
                pb.ExternalGrpcNode(providerID=ids[0]),
                pb.ExternalGrpcNode(providerID="sim://x/9", name="x-9"),
            ],
        ),
    )
    assert code == ia and "'x-9'" in msg and "nothing was deleted" in msg
    assert set(states(s, "general").values()) == {RUNNING}
    assert code_of(s.NodeGroupDeleteNodes, pb.NodeGroupDeleteNodesRequest(id="general"))[0] == ia

    # GetOptions of a group without overrides: OK with no options (CA keeps its own defaults);
    # optional RPCs without data: UNIMPLEMENTED; bad pricing input: INVALID_ARGUMENT
    un = grpc.StatusCode.UNIMPLEMENTED
    answer = s.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="general"), timeout=5)
    assert not answer.HasField("nodeGroupAutoscalingOptions")
    assert (
        code_of(
            s.PricingNodePrice,
            pb.PricingNodePriceRequest(
                node=pb.ExternalGrpcNode(providerID="sim://other/1"),
                startTimestamp=ts(0),
                endTimestamp=ts(60),
            ),
        )[0]
        == un
    )
    code, msg = code_of(
        s.PricingNodePrice, pb.PricingNodePriceRequest(node=pb.ExternalGrpcNode(providerID=ids[0]))
    )
    assert code == ia and "startTimestamp and endTimestamp are required" in msg
    code, msg = code_of(
        s.PricingNodePrice,
        pb.PricingNodePriceRequest(
            node=pb.ExternalGrpcNode(providerID=ids[0]), startTimestamp=ts(100), endTimestamp=ts(50)
        ),
    )
    assert code == ia and "is before" in msg
    assert (
        code_of(s.PricingPodPrice, pb.PricingPodPriceRequest(startTimestamp=ts(0), endTimestamp=ts(1)))[0]
        == ia
    )
    code, msg = code_of(
        s.PricingPodPrice,
        pb.PricingPodPriceRequest(pod_bytes=b"\xff\xff\xff", startTimestamp=ts(0), endTimestamp=ts(1)),
    )
    assert code == ia and "not a valid v1.Pod" in msg
    # CA 1.25-1.28 (legacy durations without MaxNodeProvisionTime): OK with no options, even for "gpu",
    # which has overrides, so they keep their defaults
    old = pb.NodeGroupAutoscalingOptions()
    old.scaleDownUnneededTime.duration = 1
    answer = s.NodeGroupGetOptions(pb.NodeGroupAutoscalingOptionsRequest(id="gpu", defaults=old), timeout=5)
    assert not answer.HasField("nodeGroupAutoscalingOptions")


def test_stockout_shows_error_class_1(env) -> None:
    s, _, _ = env
    s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="empty", delta=2))
    s.Refresh(pb.RefreshRequest())
    inst = s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="empty")).instances
    assert len(inst) == 2
    for i in inst:
        assert i.status.instanceState == CREATING
        assert i.status.errorInfo.instanceErrorClass == 1 and i.status.errorInfo.errorCode == "STOCKOUT"
    # CA deletes the failed instances; that takes the target back down, and min size does not block it
    s.NodeGroupDeleteNodes(
        pb.NodeGroupDeleteNodesRequest(
            id="empty", nodes=[pb.ExternalGrpcNode(providerID=i.id, name=i.id) for i in inst]
        )
    )
    assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="empty")).targetSize == 0


def test_client_without_certificate_is_refused(pki, clock) -> None:
    with sim_server(OPTIONS, clock=clock, pki=pki) as handle:
        for cert in ("", "rogue"):
            ch = channel(handle, pki, cert=cert)
            code, _ = code_of(stub(ch).NodeGroups, pb.NodeGroupsRequest())
            assert code == grpc.StatusCode.UNAVAILABLE
            ch.close()
        plain = grpc.insecure_channel(f"127.0.0.1:{handle.port}")
        assert code_of(stub(plain).NodeGroups, pb.NodeGroupsRequest())[0] == grpc.StatusCode.UNAVAILABLE
        plain.close()


def test_failed_creation_does_not_inflate_target_forever(clock) -> None:
    opts = {"groups": [{"id": "g", "max_size": 3, "fail": {"stockout_after": 0}}]}
    with sim_server(opts, clock=clock) as handle:
        s = stub(channel(handle))
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="g", delta=1))
        s.Refresh(pb.RefreshRequest())
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 1
        clock.advance(dt.timedelta(minutes=11).total_seconds())  # past the failed-creation TTL (10 min)
        s.Refresh(pb.RefreshRequest())
        assert s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="g")).targetSize == 0
        assert s.NodeGroupNodes(pb.NodeGroupNodesRequest(id="g")).instances == []
