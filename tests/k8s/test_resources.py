"""pod_requests against hand-computed cases of kubernetes' PodRequests rules (KEP-753 sidecars,
KEP-2837 pod-level resources, overhead). Each expected value is worked out in the comments."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cloudprovider_grpc.k8s.resources import parse_pod, pod_requests
from cloudprovider_grpc.protos import k8s_pb2

pytestmark = pytest.mark.unit

Mi = 2**20
Gi = 2**30


def container(name: str, restart: str | None = None, **requests: str) -> k8s_pb2.Container:
    c = k8s_pb2.Container(name=name)
    if restart is not None:
        c.restartPolicy = restart
    for resource, text in requests.items():
        c.resources.requests[resource].string = text
    return c


def pod(
    containers: list[k8s_pb2.Container],
    init: list[k8s_pb2.Container] = (),  # type: ignore[assignment]
    overhead: dict[str, str] | None = None,
    pod_level: dict[str, str] | None = None,
) -> k8s_pb2.Pod:
    p = k8s_pb2.Pod()
    p.spec.containers.extend(containers)
    p.spec.initContainers.extend(init)
    for resource, text in (overhead or {}).items():
        p.spec.overhead[resource].string = text
    for resource, text in (pod_level or {}).items():
        p.spec.resources.requests[resource].string = text
    # Go through the wire, as the service does with pod_bytes.
    return parse_pod(p.SerializeToString())


def test_containers_are_summed() -> None:
    p = pod([container("a", cpu="100m", memory="128Mi"), container("b", cpu="250m", memory="256Mi")])
    # cpu 0.1 + 0.25 = 0.35 = 7/20 cores; memory 128Mi + 256Mi = 384Mi = 402653184 bytes
    assert pod_requests(p) == {"cpu": Fraction(7, 20), "memory": 384 * Mi}
    assert pod_requests(p)["memory"] == 402653184


def test_regular_init_containers_take_the_max() -> None:
    p = pod(
        [container("app", cpu="100m", memory="1Gi")],
        init=[container("init1", cpu="500m", memory="512Mi"), container("init2", cpu="200m")],
    )
    # cpu: max(sum 0.1, init1 0.5, init2 0.2) = 0.5; memory: max(1Gi, 512Mi) = 1Gi
    assert pod_requests(p) == {"cpu": Fraction(1, 2), "memory": Gi}


def test_sidecars_add_up_and_count_during_later_inits() -> None:
    init = [
        container("sidecar1", "Always", cpu="100m"),
        container("init1", cpu="300m"),
        container("sidecar2", "Always", cpu="200m"),
        container("init2", cpu="250m"),
    ]
    p = pod([container("app", cpu="500m")], init=init)
    # sum = app 0.5 + sidecar1 0.1 + sidecar2 0.2 = 0.8
    # init-phase uses: sidecar1 0.1; init1 0.3 + 0.1 = 0.4; sidecar2 0.1 + 0.2 = 0.3;
    #                  init2 0.25 + 0.3 = 0.55  -> peak 0.55 < 0.8
    assert pod_requests(p) == {"cpu": Fraction(4, 5)}

    init[3] = container("init2", cpu="1")
    p = pod([container("app", cpu="500m")], init=init)
    # init2 now uses 1 + (0.1 + 0.2) = 1.3 > 0.8
    assert pod_requests(p) == {"cpu": Fraction(13, 10)}


def test_init_order_matters_for_sidecars() -> None:
    # A regular init container that runs before the sidecar starts does not count it.
    before = pod(
        [container("app", cpu="100m")], init=[container("init", cpu="1"), container("sc", "Always", cpu="1")]
    )
    # sum = 0.1 + 1 = 1.1; uses: init 1 + 0 = 1; sc 1 -> peak 1 -> 1.1
    assert pod_requests(before) == {"cpu": Fraction(11, 10)}
    after = pod(
        [container("app", cpu="100m")], init=[container("sc", "Always", cpu="1"), container("init", cpu="1")]
    )
    # sum = 1.1; uses: sc 1; init 1 + 1 = 2 -> peak 2 -> 2
    assert pod_requests(after) == {"cpu": Fraction(2)}


def test_resources_only_some_containers_request() -> None:
    p = pod(
        [container("app", cpu="1"), container("gpu", **{"nvidia.com/gpu": "2"})],
        init=[container("fetch", **{"ephemeral-storage": "10Gi"})],
    )
    # nvidia.com/gpu only in a container; ephemeral-storage only in an init container (max with 0)
    assert pod_requests(p) == {"cpu": 1, "nvidia.com/gpu": 2, "ephemeral-storage": 10 * Gi}


def test_overhead_is_added_last() -> None:
    p = pod(
        [container("app", cpu="1")],
        init=[container("init", cpu="2")],
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    # max(1, 2) = 2 cores, then + 0.1 overhead = 2.1; memory only from overhead: 64Mi
    assert pod_requests(p) == {"cpu": Fraction(21, 10), "memory": 64 * Mi}


def test_pod_level_requests_override_supported_resources() -> None:
    p = pod(
        [container("app", cpu="500m", memory="256Mi", **{"nvidia.com/gpu": "1"})],
        overhead={"cpu": "250m"},
        pod_level={"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "4Mi"},
    )
    # cpu: pod-level 2 replaces 0.5, + overhead 0.25 = 2.25; memory: pod-level 1Gi replaces 256Mi;
    # hugepages-2Mi is a pod-level resource; the GPU is not, so the container's 1 stays.
    assert pod_requests(p) == {
        "cpu": Fraction(9, 4),
        "memory": Gi,
        "hugepages-2Mi": 4 * Mi,
        "nvidia.com/gpu": 1,
    }


def test_pod_level_requests_of_unsupported_resources_are_ignored() -> None:
    p = pod([container("app", cpu="500m", **{"nvidia.com/gpu": "1"})], pod_level={"nvidia.com/gpu": "4"})
    # IsPodLevelRequestsSet is false (no cpu/memory/hugepages key): nothing is replaced.
    assert pod_requests(p) == {"cpu": Fraction(1, 2), "nvidia.com/gpu": 1}


def test_empty_pod_requests_nothing() -> None:
    assert pod_requests(pod([container("app")])) == {}


def test_invalid_quantities_are_errors() -> None:
    bad = k8s_pb2.Pod()
    bad.spec.containers.add(name="app").resources.requests["cpu"].string = "lots"
    with pytest.raises(ValueError, match=r"spec.containers\[0\].resources.requests\['cpu'\]"):
        parse_pod(bad.SerializeToString())
    with pytest.raises(ValueError, match=r"spec.containers\[0\].resources.requests\['cpu'\]"):
        pod_requests(bad)
    limits = k8s_pb2.Pod()
    limits.spec.initContainers.add(name="i").resources.limits["memory"].string = ""
    with pytest.raises(ValueError, match=r"spec.initContainers\[0\].resources.limits\['memory'\]"):
        parse_pod(limits.SerializeToString())
    huge = k8s_pb2.Pod()
    huge.spec.overhead["cpu"].string = "1e2000"  # valid for Go, but no resource is that large
    with pytest.raises(ValueError, match=r"spec.overhead\['cpu'\].*too large"):
        parse_pod(huge.SerializeToString())
    with pytest.raises(ValueError, match=r"not a serialized v1\.Pod"):
        parse_pod(b"\x12\x80")
