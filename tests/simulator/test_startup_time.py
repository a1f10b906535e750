"""MaxNodeStartupTime across CA releases: up to 1.34 a registered node has 15 minutes to turn
Ready before it counts as unready; on 1.35-1.36 a group whose NodeGroupGetOptions answers options
gets 0, because the externalgrpc client never fills the field from the answer
(kubernetes/autoscaler#10245), so its booting nodes count as unready at once and can stop
autoscaling. This project's server answers those releases no options, so they keep 15 minutes; a
server that answered them options is stood in for by lifting that rule. From 1.37 the group's own
time comes back in options field 11."""

from __future__ import annotations

from unittest import mock

import pytest

from cloudprovider_grpc.simulator import parse_scenario, run

pytestmark = pytest.mark.integration


def _run(version: str, options: dict | None):
    group = {"id": "g", "max_size": 10, "capacity": {"cpu": "2", "memory": "4Gi"}}
    if options is not None:
        group["options"] = options
    s = parse_scenario(
        {
            "name": "boot",
            "duration": "6m",
            "cloud": {"provisioning_delay": 30, "groups": [group]},
            "node_ready_delay": "3m",
            "autoscaler": {"version": version},
            "workloads": [{"name": "w", "replicas": 10, "requests": {"cpu": "1", "memory": "1Gi"}}],
        }
    )
    return run(s)


def test_booting_nodes_trip_the_unready_limits_on_1_35_when_get_options_answers() -> None:
    # a server that answers CA 1.35 options (this one does not: see the next test)
    with mock.patch("cloudprovider_grpc.grpcapi.getoptions.time_read_as_zero", lambda *_: None):
        r = _run("1.35", {"scale_down_unneeded_time": 300.0})
    zero = [d for d in r.decisions if d.kind == "startup-time-zero"]
    assert [(d.group, d.inputs["version"]) for d in zero] == [("g", "1.35")]
    unhealthy = [d for d in r.decisions if d.kind == "cluster-unhealthy"]
    assert unhealthy and unhealthy[0].inputs["unready"] > 3  # ok-total-unready-count 3
    assert any("Cluster is not ready for autoscaling: 5 unready nodes" in line for line in r.log)
    assert any("MaxNodeStartupTime is 0" in note for note in r.notes)
    assert "notes" in r.to_dict()


@pytest.mark.parametrize(
    ("version", "options"),
    [
        ("1.34", {"scale_down_unneeded_time": 300.0}),
        ("1.35", None),
        ("1.35", {"scale_down_unneeded_time": 300.0}),  # this server answers 1.35 no options
        ("1.36", {"scale_down_unneeded_time": 300.0}),
        ("1.37", {"scale_down_unneeded_time": 300.0}),  # field 11: CA's own 15 minutes echoed
    ],
)
def test_booting_nodes_stay_upcoming_before_1_35_or_without_get_options(version, options) -> None:
    r = _run(version, options)
    kinds = {d.kind for d in r.decisions}
    assert "scale-up" in kinds
    assert not kinds & {"cluster-unhealthy", "startup-time-zero"}
    assert r.notes == []


def test_ca_1_37_takes_the_group_startup_time_from_field_11() -> None:
    """A group's `max_node_startup_time` of 60 s reaches CA 1.37: nodes that take 3 minutes to turn
    Ready count as unready after a minute, enough of them to trip the unready limits."""
    r = _run("1.37", {"max_node_startup_time": 60.0})
    assert not [d for d in r.decisions if d.kind == "startup-time-zero"]
    unhealthy = [d for d in r.decisions if d.kind == "cluster-unhealthy"]
    assert unhealthy and unhealthy[0].inputs["unready"] > 3
    # the same group on 1.36 gets no options from this server, so its nodes keep 15 minutes
    assert not [
        d for d in _run("1.36", {"max_node_startup_time": 60.0}).decisions if d.kind == "cluster-unhealthy"
    ]
