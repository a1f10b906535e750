"""The VKE driver against the real emulator: discovery, states, absolute sizes, exact removals,
templates and prices from the plan catalogue, node label fallbacks."""

from __future__ import annotations

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.k8s.template import Taint
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef
from cloudprovider_grpc.providers.registry import NodesSpec
from cloudprovider_grpc.providers.vultr.driver import node_state
from tests.providers.vultr.conftest import PROVISION_SECONDS, make_driver, patch
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


def test_groups_are_the_autoscaled_pools_with_vke_bounds(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator)
    pools = {p.config.name: p for p in driver.list_pools()}
    assert sorted(pools) == ["general", "gpu"]  # "system" has auto_scaler false
    general, gpu = pools["general"], pools["gpu"]
    assert general.config.id == emulator.pool_id("general")
    assert (general.config.min_size, general.config.max_size, general.desired) == (1, 20, 2)
    assert (gpu.config.min_size, gpu.config.max_size) == (1, 3)  # min_nodes 0: VKE keeps 1
    assert [m.id for m in general.machines] == [f"vultr://{n}" for n in emulator.node_ids(general.config.id)]
    assert all(m.handle == m.id.removeprefix("vultr://") for m in general.machines)
    assert all(m.name.startswith("general-") and m.state == InstanceState.RUNNING for m in general.machines)
    assert sorted(g.name for g in driver.groups()) == ["general", "gpu"]


def test_nodes_flag_narrows_by_label_or_id_and_overrides_bounds(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator, nodes=(NodesSpec(0, 7, "general"),))
    [pool] = driver.list_pools()
    assert (pool.config.name, pool.config.min_size, pool.config.max_size) == ("general", 1, 7)
    by_id = make_driver(emulator, nodes=(NodesSpec(1, 2, emulator.pool_id("gpu")),))
    assert [p.config.name for p in by_id.list_pools()] == ["gpu"]


def test_a_nodes_flag_naming_no_autoscaled_pool_is_warned_about_once(
    emulator: VultrEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    driver = make_driver(emulator, nodes=(NodesSpec(1, 2, "system"), NodesSpec(1, 3, "general")))
    for _ in range(2):
        assert [p.config.name for p in driver.list_pools()] == ["general"]
    warned = [r.getMessage() for r in caplog.records if "--nodes names" in r.getMessage()]
    assert warned == ["vultr: --nodes names 'system', which is no pool with auto_scaler on in the cluster"]


def test_group_set_follows_the_cloud(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator)
    driver.list_pools()
    gpu = emulator.pool_id("gpu")
    assert patch(emulator, gpu, {"auto_scaler": False}).status_code == 202
    assert [p.config.name for p in driver.list_pools()] == ["general"]
    assert [g.name for g in driver.groups()] == ["general"]


def test_states_follow_node_status(emulator: VultrEmulator, emu_clock: ManualClock) -> None:
    driver = make_driver(emulator)
    general = emulator.pool_id("general")
    assert driver.set_size(general, 5) is None
    [pool] = [p for p in driver.list_pools() if p.config.id == general]
    assert pool.desired == 5
    assert sorted(m.state.name for m in pool.machines) == ["CREATING"] * 3 + ["RUNNING"] * 2
    emu_clock.advance(PROVISION_SECONDS)
    [pool] = [p for p in driver.list_pools() if p.config.id == general]
    assert {m.state for m in pool.machines} == {InstanceState.RUNNING}


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("active", InstanceState.RUNNING),
        ("pending", InstanceState.CREATING),
        ("deleting", InstanceState.DELETING),
        ("something-new", InstanceState.RUNNING),
    ],
)
def test_node_state_mapping(status: str, state: InstanceState) -> None:
    assert node_state(status) == state


def test_set_size_checks_the_echo(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator)
    general = emulator.pool_id("general")
    emulator.stale_echoes = 1
    with pytest.raises(CloudError) as info:
        driver.set_size(general, 4)
    assert info.value.transient and info.value.code == "SIZE_MISMATCH"
    assert driver.set_size(general, 4) is None  # absolute: sending it again is harmless
    assert emulator.pool_record(general)["node_quantity"] == 4
    with pytest.raises(CloudError) as below:
        driver.set_size(general, 0)
    assert not below.value.transient
    assert [e.method for e in emulator.request_log()].count("PATCH") == 2  # size 0 never sent


def test_remove_machines_removes_exactly_those_and_lowers_the_quantity(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator)
    general = emulator.pool_id("general")
    driver.set_size(general, 5)
    [pool] = [p for p in driver.list_pools() if p.config.id == general]
    victims = pool.machines[1:3]
    outcome = driver.remove_machines(general, victims)
    assert outcome.failed == {} and outcome.operation is None
    left = emulator.node_ids(general)
    assert sorted(left) == sorted(m.handle for m in pool.machines if m not in victims)
    assert emulator.pool_record(general)["node_quantity"] == 3
    # again: already gone counts as removed, nothing else is touched
    assert driver.remove_machines(general, victims).failed == {}
    assert emulator.node_ids(general) == left


def test_remove_reports_per_node_failures(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator)
    general = emulator.pool_id("general")
    [pool] = [p for p in driver.list_pools() if p.config.id == general]
    outcome = driver.remove_machines(general, pool.machines)  # both: VKE keeps the last one
    assert len(outcome.failed) == 1
    [(mid, err)] = outcome.failed.items()
    assert err.status == 400 and not err.transient and mid in {m.id for m in pool.machines}
    assert emulator.node_ids(general) == [mid.removeprefix("vultr://")]


def test_template_from_plan_pool_labels_and_taints(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator, options={"reserved": {"cpu": "100m", "memory": "512Mi"}})
    driver.list_pools()
    driver.refresh_catalog()
    general, gpu = emulator.pool_id("general"), emulator.pool_id("gpu")
    t = driver.template(general)
    assert t is not None
    assert t.capacity == {"cpu": "4", "memory": "8192Mi", "ephemeral-storage": "160Gi"}
    assert t.reserved == {"cpu": "100m", "memory": "512Mi"}
    assert (t.instance_type, t.region, t.zone) == ("vc2-4c-8gb", "ewr", "ewr")
    assert t.labels == {"vke.vultr.com/node-pool": "general"} and t.taints == ()
    g = driver.template(gpu)
    assert g is not None and g.capacity["nvidia.com/gpu"] == "1" and g.capacity["cpu"] == "6"
    assert g.labels == {
        "accelerator": "a16", "vke.vultr.com/node-pool": "gpu", "nvidia.com/gpu.product": "NVIDIA_A16",
    }  # fmt: skip
    assert g.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert driver.gpu_types() == ["NVIDIA_A16"]
    assert driver.hourly_price(general) == pytest.approx(40.0 / 730)
    assert driver.template("no-such-pool") is None and driver.hourly_price("no-such-pool") is None


def test_node_label_fallbacks(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator)
    driver.list_pools()
    node_id = emulator.node_ids(emulator.pool_id("general"))[0]
    node = NodeRef(provider_id="", name="x", labels={"vke.vultr.com/node-id": node_id})
    assert driver.machine_of(node) == f"vultr://{node_id}"
    assert driver.group_of(NodeRef("", labels={"vke.vultr.com/node-pool": "gpu"})) == emulator.pool_id("gpu")
    assert driver.group_of(NodeRef("", labels={"vke.vultr.com/node-pool": "system"})) is None
    assert driver.machine_of(NodeRef("")) is None and driver.group_of(NodeRef("")) is None


def test_listing_failure_is_raised_whole(emulator: VultrEmulator) -> None:
    driver = make_driver(emulator, options={"cluster_id": "00000000-0000-4000-8000-00000000dead"})
    with pytest.raises(CloudError) as info:
        driver.list_pools()
    assert info.value.status == 404 and not info.value.transient
