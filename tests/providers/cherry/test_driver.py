"""The Cherry driver against the emulator: membership, create body, delete, states, template, price."""

from __future__ import annotations

import base64
import re

import pytest
import requests

from cloudprovider_grpc.emulators.cherry import CherryEmulator
from cloudprovider_grpc.k8s.node import decode_node, encode_template_node
from cloudprovider_grpc.providers.contract import ErrorClass, InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import CloudError, Machine, MachineGone
from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
from tests.providers.cherry.conftest import ENV, PROJECT, TOKEN, make_driver
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration

H = {"Authorization": f"Bearer {TOKEN}"}


def seed(emu: CherryEmulator, tags: dict | None, project: int = PROJECT, **body) -> int:
    body = {"plan": "e5_1620v4", "region": "eu_nord_1", "image": "ubuntu_18_04", "tags": tags, **body}
    r = requests.post(f"{emu.base_url}projects/{project}/servers", json=body, headers=H)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def api_calls(emu: CherryEmulator, method: str, path_suffix: str) -> int:
    return sum(1 for e in emu.request_log() if e.method == method and e.path.endswith(path_suffix))


def test_membership_is_by_cluster_and_pool_tags(emulator: CherryEmulator) -> None:
    mine = seed(emulator, {"k8s-cluster": "cluster1", "k8s-nodepool": "pool1"}, hostname="a")
    seed(emulator, {"k8s-cluster": "other", "k8s-nodepool": "pool1"})  # another cluster
    seed(emulator, {"k8s-cluster": "cluster1", "k8s-nodepool": "unmanaged"})  # pool not configured
    seed(emulator, None)  # untagged
    other = seed(emulator, {"k8s-cluster": "cluster1", "k8s-nodepool": "pool2", "k8s-create-token": "t1"})
    emulator.clear_log()
    machines = make_driver(emulator).list_machines()
    assert sorted((m.id, m.group, m.token) for m in machines) == [
        (f"cherryservers://{mine}", "pool1", ""),
        (f"cherryservers://{other}", "pool2", "t1"),
    ]
    assert next(m for m in machines if m.group == "pool1").name == "a"
    assert len(emulator.request_log()) == 1  # one list call for the project


def test_a_token_on_two_servers_keeps_the_oldest_and_deletes_the_other(emulator: CherryEmulator) -> None:
    # a create that timed out and was executed late, after the token lookup had found nothing;
    # the managed layer deduplicates on its listing
    # (providers/machinery/machines/listing.py _delete_duplicates)
    tags = {"k8s-cluster": "cluster1", "k8s-nodepool": "pool1", "k8s-create-token": "dup"}
    first, second = seed(emulator, tags), seed(emulator, tags)
    assert second != first
    provider = MachineProvider(make_driver(emulator), inline_workers=True)
    provider.refresh()
    assert provider.target_size("pool1") == 1
    provider.refresh()  # inline workers run the delete
    provider.refresh()
    assert [r["id"] for r in emulator.server_records()] == [first]
    assert [i.id for i in provider.nodes("pool1")] == [f"cherryservers://{first}"]


def test_listing_follows_pages(emulator: CherryEmulator) -> None:
    ids = [seed(emulator, {"k8s-cluster": "cluster1", "k8s-nodepool": "pool1"}) for _ in range(10)]
    emulator.clear_log()
    driver = make_driver(emulator)
    driver.client.page_size = 4
    assert sorted(m.id for m in driver.list_machines()) == sorted(f"cherryservers://{i}" for i in ids)
    offsets = [e.query["offset"] for e in emulator.request_log()]
    assert offsets == [["0"], ["4"], ["8"]]


def test_create_sends_the_intree_body_with_rendered_templates(emulator: CherryEmulator) -> None:
    driver = make_driver(emulator)
    machine = driver.create_machine("pool1", "tok123")
    assert machine.state == InstanceState.CREATING and machine.token == "tok123" and machine.group == "pool1"
    (server,) = emulator.server_records(PROJECT)
    assert machine.id == f"cherryservers://{server['id']}"
    assert server["tags"] == {
        "k8s-cluster": "cluster1",
        "k8s-nodepool": "pool1",
        "k8s-create-token": "tok123",
    }
    assert (server["plan"], server["region"], server["image"]) == ("e5_1620v4", "eu_nord_1", "ubuntu_18_04")
    assert re.fullmatch(r"k8s-cluster1-pool1-[ac-z]{8}", server["hostname"])
    assert machine.name == server["hostname"]
    script = base64.b64decode(server["user_data"]).decode()
    assert script.startswith("#!/bin/bash\n")
    join = "kubeadm join --discovery-token-unsafe-skip-ca-verification"
    assert f"{join} --token abcdef.0123456789abcdef 10.1.2.3:6443" in script
    assert "{{" not in script


def test_create_request_shape_matches_intree(emulator: CherryEmulator) -> None:
    driver = make_driver(
        emulator, options={"pools": {"pool2": {"ssh-key-ids": [3, 4], "os-partition-size": 50}}}
    )
    body = driver.create_request(driver.config.pools["pool2"], "t")
    assert body["project_id"] == PROJECT and body["ip_addresses"] is None
    assert body["ssh_keys"] == [3, 4] and body["os_partition_size"] == 50
    plain = driver.create_request(driver.config.pools["pool1"], "t")
    assert plain["ssh_keys"] is None and "os_partition_size" not in plain


def test_stockout_is_out_of_resources(emulator: CherryEmulator) -> None:
    emulator.set_stock({"e5_1620v4": {"*": 0}})
    with pytest.raises(CloudError) as err:
        make_driver(emulator).create_machine("pool1", "t")
    assert err.value.error_class == ErrorClass.OUT_OF_RESOURCES and not err.value.transient
    assert "out of stock" in err.value.message


def test_bad_plan_is_a_permanent_other_error(emulator: CherryEmulator) -> None:
    with pytest.raises(CloudError) as err:
        make_driver(emulator, options={"pools": {"pool1": {"plan": "nope"}}}).create_machine("pool1", "t")
    assert err.value.error_class == ErrorClass.OTHER and not err.value.transient
    assert "Given server plan was not found." in err.value.message


def test_delete_and_delete_again_is_machine_gone(emulator: CherryEmulator) -> None:
    driver = make_driver(emulator)
    machine = driver.create_machine("pool1", "t")
    driver.delete_machine(machine)
    assert emulator.server_records() == []
    with pytest.raises(MachineGone):
        driver.delete_machine(machine)
    with pytest.raises(MachineGone):
        driver.delete_machine(Machine(id="cherryservers://pending-abc", group="pool1"))


def test_a_bare_204_without_content_type_is_a_successful_delete(emulator: CherryEmulator) -> None:
    emulator.bare_204 = True
    driver = make_driver(emulator)
    machine = driver.create_machine("pool1", "t")
    driver.delete_machine(machine)
    deletes = [e for e in emulator.request_log() if e.method == "DELETE"]
    assert [e.status for e in deletes] == [204]
    assert emulator.server_records() == []


def test_states_follow_the_server(emulator: CherryEmulator, emu_clock: ManualClock) -> None:
    driver = make_driver(emulator)
    first = driver.create_machine("pool1", "a")
    emulator.fail_next_deployments = 1
    driver.create_machine("pool1", "b")
    emu_clock.advance(61)
    emulator.terminate_seconds = 100
    third = driver.create_machine("pool1", "c")
    requests.delete(f"{emulator.base_url}servers/{third.id.removeprefix('cherryservers://')}", headers=H)
    by_token = {m.token: m for m in driver.list_machines()}
    assert by_token["a"].state == InstanceState.RUNNING and by_token["a"].id == first.id
    assert by_token["b"].state == InstanceState.CREATING and by_token["b"].error is not None
    assert by_token["b"].error.code == "DEPLOYMENT_FAILED"
    assert by_token["c"].state == InstanceState.DELETING


def test_template_node_from_the_plan(emulator: CherryEmulator) -> None:
    driver = make_driver(emulator, options={"reserved": {"cpu": "500m", "memory": "1Gi"}})
    assert driver.template("pool1") is None  # nothing before the catalogue is loaded
    emulator.clear_log()
    driver.refresh_catalog()
    assert [e.path for e in emulator.request_log()] == ["/v1/plans"]
    tpl = driver.template("pool1")
    node = decode_node(encode_template_node(tpl, "pool1"))
    cap = {k: v.string for k, v in node.status.capacity.items()}
    alloc = {k: v.string for k, v in node.status.allocatable.items()}
    assert cap == {"cpu": "8", "memory": "64Gi", "pods": "110"}
    assert alloc == {"cpu": "7500m", "memory": "63Gi", "pods": "110"}
    labels = dict(node.metadata.labels)
    assert labels["node.kubernetes.io/instance-type"] == "e5_1620v4"  # the slug, as the CCM sets it
    assert labels["topology.kubernetes.io/region"] == "eu_nord_1"  # config said "EU-Nord-1"
    assert labels["pool"] == "pool1"
    assert len(emulator.request_log()) == 1  # templates come from memory


def test_gpu_pools_take_their_gpus_from_the_config_and_price_from_the_plan(emulator: CherryEmulator) -> None:
    """The API's plan specs have no GPU entry, so a GPU pool states its GPUs in the config; a GPU
    plan without them gets a template with no GPUs rather than a guessed count."""
    pools = {"pool2": {"plan": "gpu_a2_1", "gpu-count": 2, "gpu-type": "NVIDIA A2"}}
    driver = make_driver(emulator, options={"pools": pools})
    driver.refresh_catalog()
    node = decode_node(encode_template_node(driver.template("pool2"), "pool2"))
    assert node.status.capacity["nvidia.com/gpu"].string == "2"
    assert node.metadata.labels["cherryservers.com/gpu"] == "nvidia-a2"
    assert driver.gpu_label == "cherryservers.com/gpu"
    assert driver.gpu_types() == ["nvidia-a2"]
    unstated = make_driver(emulator, options={"pools": {"pool2": {"plan": "gpu_a2_1"}}})
    unstated.refresh_catalog()
    plain = decode_node(encode_template_node(unstated.template("pool2"), "pool2"))
    assert unstated.gpu_types() == []
    assert "nvidia.com/gpu" not in plain.status.capacity
    assert "cherryservers.com/gpu" not in plain.metadata.labels
    plans = {p["slug"]: p for p in requests.get(f"{emulator.base_url}plans", headers=H).json()}
    hourly = {
        p["slug"]: next(x["price"] for x in p["pricing"] if x["unit"] == "Hourly") for p in plans.values()
    }
    assert driver.hourly_price("pool2") == hourly["gpu_a2_1"]
    assert driver.hourly_price("pool1") == hourly["e5_1620v4"]
    assert driver.hourly_price("nope") is None


def test_controller_nodes_never_belong(emulator: CherryEmulator) -> None:
    driver = make_driver(emulator)
    assert driver.is_control_plane(NodeRef("cherryservers://1", "m", {"node-role.kubernetes.io/master": ""}))
    assert driver.is_control_plane(
        NodeRef("cherryservers://1", "m", {"node-role.kubernetes.io/control-plane": ""})
    )
    assert not driver.is_control_plane(NodeRef("cherryservers://1", "w", {"pool": "pool1"}))
    custom = make_driver(emulator, env={**ENV, "CHERRY_CONTROLLER_NODE_IDENTIFIER_LABEL": "example.com/ctl"})
    assert custom.is_control_plane(NodeRef("cherryservers://1", "m", {"example.com/ctl": "true"}))


def test_wrong_token_is_a_precise_permanent_error(emulator: CherryEmulator) -> None:
    driver = make_driver(emulator, env={**ENV, "CHERRY_AUTH_TOKEN": "wrong"})
    with pytest.raises(CloudError) as err:
        driver.list_machines()
    assert err.value.status == 401 and not err.value.transient
    assert "wrong" not in err.value.message


def test_the_api_rate_limit_is_survived_by_honouring_retry_after(emulator: CherryEmulator) -> None:
    emulator.rate_limit_per_s = 4  # the documented limit, answered with 429 + Retry-After
    driver = make_driver(emulator, options={"rate-limit": 100})  # our own limiter set far too high
    for _ in range(8):
        assert driver.list_machines() == []
    statuses = [e.status for e in emulator.request_log()]
    assert statuses.count(200) == 8 and 429 in statuses

    emulator.clear_log()
    emulator.reset_rate_limits()
    polite = make_driver(emulator, options={"rate-limit": 4})  # the default client limit
    for _ in range(6):
        polite.list_machines()
    assert [e.status for e in emulator.request_log()] == [200] * 6
