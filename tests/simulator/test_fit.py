"""Scheduling predicates: resources, nodeSelector, required node affinity, taints/tolerations.

Reproduces the kube-scheduler filters CA runs on template and real nodes (`simulator/cluster.go`
through the scheduler framework): NodeResourcesFit (allocatable incl. `pods`), NodeAffinity and
nodeSelector, TaintToleration (NoSchedule and NoExecute)."""

import pytest

from cloudprovider_grpc.simulator.model import Requirement, Taint, Toleration, effective_requests
from cloudprovider_grpc.simulator.predicates import (
    fit_count,
    resource_reason,
    resources_fit,
    static_fit,
    static_reason,
)

from .helpers import pod_shape, shape

pytestmark = pytest.mark.unit

LABELS = {"pool": "a", "zone": "z1", "disk": "ssd"}


@pytest.mark.parametrize(
    "req, ok",
    [
        (Requirement("pool", "In", ("a", "b")), True),
        (Requirement("pool", "In", ("b",)), False),
        (Requirement("pool", "NotIn", ("b",)), True),
        (Requirement("pool", "NotIn", ("a",)), False),
        (Requirement("missing", "NotIn", ("a",)), True),
        (Requirement("disk", "Exists"), True),
        (Requirement("gpu", "Exists"), False),
        (Requirement("gpu", "DoesNotExist"), True),
        (Requirement("disk", "DoesNotExist"), False),
    ],
)
def test_required_node_affinity_operators(req, ok):
    assert static_fit(pod_shape(affinity=(req,)), shape(labels=LABELS)) is ok


def test_node_selector_all_must_match():
    assert static_fit(pod_shape(node_selector={"pool": "a", "zone": "z1"}), shape(labels=LABELS))
    ps = pod_shape(node_selector={"pool": "a", "zone": "z2"})
    assert not static_fit(ps, shape(labels=LABELS))
    assert static_reason(ps, shape(labels=LABELS)) == "node(s) didn't match Pod's node affinity/selector"


GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    "tolerations, taint, ok",
    [
        ((), GPU_TAINT, False),
        ((Toleration("nvidia.com/gpu", "Exists"),), GPU_TAINT, True),
        ((Toleration("nvidia.com/gpu", "Equal", "present"),), GPU_TAINT, True),
        ((Toleration("nvidia.com/gpu", "Equal", "absent"),), GPU_TAINT, False),
        ((Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"),), GPU_TAINT, False),
        ((Toleration(operator="Exists"),), GPU_TAINT, True),  # empty key + Exists tolerates everything
        ((), Taint("dedicated", "x", "NoExecute"), False),
        ((Toleration("dedicated", "Equal", "x", "NoExecute"),), Taint("dedicated", "x", "NoExecute"), True),
        ((), Taint("soft", "x", "PreferNoSchedule"), True),  # scoring only, never filters
    ],
)
def test_taints_and_tolerations(tolerations, taint, ok):
    assert static_fit(pod_shape(tolerations=tolerations), shape(taints=(taint,))) is ok


def test_untolerated_taint_reason():
    assert static_reason(pod_shape(), shape(taints=(GPU_TAINT,))) == (
        "node(s) had untolerated taint {nvidia.com/gpu=present:NoSchedule}"
    )


def test_resources_and_counts():
    free = {"cpu": 3900, "memory": 16 * 1024**3, "pods": 110}
    one = effective_requests([{"cpu": "1", "memory": "1Gi"}], [])
    assert one == {"cpu": 1000, "memory": 1024**3, "pods": 1}
    assert resources_fit(one, free)
    assert fit_count(one, free) == 3  # 3900 // 1000
    gpu = effective_requests([{"cpu": "1", "nvidia.com/gpu": "1"}], [])
    assert not resources_fit(gpu, free)  # the node has no GPU at all
    assert fit_count(gpu, free) == 0
    assert resource_reason(gpu, free) == "Insufficient nvidia.com/gpu"


def test_effective_requests_sum_containers_and_max_init():
    # containers 250m + 500m = 750m; init container 1 cpu is larger -> 1000m; memory 64Mi+64Mi=128Mi
    r = effective_requests(
        [{"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m", "memory": "64Mi"}],
        [{"cpu": "1", "memory": "32Mi"}],
    )
    assert r == {"cpu": 1000, "memory": 128 * 1024**2, "pods": 1}
