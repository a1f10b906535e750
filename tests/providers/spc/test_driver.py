"""The SPC driver against the emulator: group discovery, ids, states, create, delete, templates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudprovider_grpc.core.clouderrors import CloudError, ErrorClass, MachineGone
from cloudprovider_grpc.emulators.spc import SpcEmulator
from cloudprovider_grpc.emulators.spc.emulator import INITIAL_MASTER
from cloudprovider_grpc.k8s.node import decode_node, encode_template_node
from cloudprovider_grpc.providers.contract import InstanceState, NodeRef
from cloudprovider_grpc.providers.driver import Machine
from cloudprovider_grpc.providers.registry import NodesSpec
from cloudprovider_grpc.providers.spc.providerid import derive_provider_id, parse_template
from tests.providers.spc.conftest import BUILDING, CLUSTER, DRAFT, PROVISIONED, make_driver, pools
from tests.support.servers import ManualClock

pytestmark = pytest.mark.integration


def api_calls(emu: SpcEmulator) -> list[tuple[str, str]]:
    return [(e.method, e.path.rsplit("/", 1)[-1]) for e in emu.request_log()]


def test_groups_are_the_autoscaled_pools_discovered_on_every_listing(emulator: SpcEmulator) -> None:
    driver = make_driver(emulator)
    assert driver.groups() == []  # nothing is known before the first listing (no I/O at build)
    emulator.clear_log()
    machines = driver.list_machines()
    assert api_calls(emulator) == [("GET", "nodepools"), ("GET", "nodes")]
    (p1, p2) = pools(emulator)
    assert [(g.id, g.min_size, g.max_size, g.name) for g in driver.groups()] == [
        (p1, 1, 8, p1.removeprefix("autoscaling-")),
        (p2, 0, 4, p2.removeprefix("autoscaling-")),
    ]
    (worker,) = machines  # the master never belongs
    assert worker.group == p1 and worker.state == InstanceState.RUNNING and worker.token == ""
    record = next(n for n in emulator.node_records(CLUSTER) if n["role"] == "worker")
    assert worker.id == f"aws:///us-west-2a/{record['provider_node_id']}"
    assert worker.handle == str(record["pk"]) and worker.name == record["instance_id"]
    # autoscaling switched off for pool 2 and a new autoscaled pool: the next listing says so
    emulator.pools[pools(emulator)[p2]["pk"]]["autoscaled"] = False
    emulator.add_pool(
        CLUSTER, name="GPU", size="m4.xlarge", min_count=0, max_count=2, gpu_size="p2.xlarge", gpu_count=1
    )
    driver.list_machines()
    ids = [g.id for g in driver.groups()]
    assert p2 not in ids and len(ids) == 2 and ids[0] == p1


def test_a_narrowing_spec_that_names_no_pool_is_logged_once(
    emulator: SpcEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    driver = make_driver(emulator, nodes=(NodesSpec(0, 3, "autoscaling-typo"),))
    assert not caplog.records  # nothing is known before the first listing: no false alarm
    driver.list_machines()
    driver.list_machines()
    assert driver.groups() == []
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "spc: --nodes 0:3:autoscaling-typo names no autoscaled node pool of the cluster"
    ]


def test_narrowing_and_gen1_groups(emulator: SpcEmulator) -> None:
    p1, p2 = pools(emulator)
    driver = make_driver(emulator, nodes=(NodesSpec(0, 3, p2), NodesSpec.parse("0:5:t2.medium:legacy")))
    driver.list_machines()
    assert [(g.id, g.max_size) for g in driver.groups()] == [("autoscaling-legacy", 5), (p2, 3)]
    # gen 1 adds by group with POST add_node; with no pool of that name, the API refuses it
    with pytest.raises(CloudError, match="node_pool: Invalid pk"):
        driver.create_machine("autoscaling-legacy", "")
    # ... and a gen 1 group that names a real pool adds through it
    pool_id = p1.removeprefix("autoscaling-")
    driver = make_driver(emulator, nodes=(NodesSpec.parse(f"1:8:t2.medium:{pool_id}"),))
    driver.list_machines()
    m = driver.create_machine(p1, "")
    assert m.group == p1 and m.state == InstanceState.CREATING


def test_states_and_the_draft_timeout(emulator: SpcEmulator, emu_clock: ManualClock) -> None:
    clock = ManualClock()
    driver = make_driver(emulator, clock, options={"draft-timeout": 300})
    driver.list_machines()
    p1 = driver.groups()[0].id
    new = driver.create_machine(p1, "ignored-token")
    assert new.state == InstanceState.CREATING and new.id == new.name  # no provider id while in draft
    emulator.stuck_next, emulator.fail_next = 1, 1
    stuck = driver.create_machine(p1, "")
    failed = driver.create_machine(p1, "")

    def by_handle() -> dict[str, Machine]:
        return {m.handle: m for m in driver.list_machines()}

    emu_clock.advance(DRAFT)
    now = by_handle()
    assert now[new.handle].state == InstanceState.CREATING and now[new.handle].id.startswith(
        "aws:///us-west-2a/i-"
    )
    assert now[failed.handle].error is not None and now[failed.handle].error.code == "SPC_NODE_FAILED"
    assert now[failed.handle].error.error_class == ErrorClass.OTHER
    assert now[stuck.handle].error is None
    emu_clock.advance(BUILDING + PROVISIONED)
    clock.advance(299)
    now = by_handle()
    assert now[new.handle].state == InstanceState.RUNNING and now[stuck.handle].error is None
    clock.advance(1)
    error = by_handle()[stuck.handle].error
    assert error is not None and error.code == "SPC_NODE_STUCK_IN_DRAFT" and "300s" in error.message


def test_delete_is_by_pk_after_can_delete(emulator: SpcEmulator) -> None:
    driver = make_driver(emulator)
    (worker,) = driver.list_machines()
    emulator.clear_log()
    driver.delete_machine(worker)
    assert [(e.method, e.path.split("/")[-1]) for e in emulator.request_log()] == [
        ("GET", "can_delete"),
        ("DELETE", worker.handle),
    ]
    master = next(n for n in emulator.node_records(CLUSTER) if n["role"] == "master")
    with pytest.raises(CloudError, match=INITIAL_MASTER):
        driver.delete_machine(Machine("x", "g", handle=str(master["pk"])))
    # a machine from the journal without its handle: found by id in the last listing, else gone
    fresh = driver.create_machine(worker.group, "")
    driver.list_machines()
    driver.delete_machine(Machine(fresh.id, fresh.group))
    assert (
        next(n for n in emulator.node_records(CLUSTER) if str(n["pk"]) == fresh.handle)["state"] == "deleting"
    )
    with pytest.raises(MachineGone):
        driver.delete_machine(Machine("aws:///us-west-2a/i-unknown", worker.group))


def test_template_from_the_machine_table_with_the_labels_the_fork_left_out(emulator: SpcEmulator) -> None:
    emulator.add_pool(
        CLUSTER,
        name="GPU",
        size="m4.xlarge",
        min_count=0,
        max_count=2,
        gpu_size="p2.xlarge",
        gpu_count=1,
        labels="team=ml,disk=ssd",
    )
    driver = make_driver(emulator)
    driver.list_machines()
    p1 = driver.groups()[0].id
    tpl = driver.template(p1)
    assert tpl is not None and tpl.capacity == {"cpu": "2", "memory": "4000Mi"}
    node = decode_node(encode_template_node(tpl, p1))
    labels = dict(node.metadata.labels)
    assert labels["stackpoint.io/node_group"] == p1 and labels["stackpoint.io/role"] == "worker"
    assert labels["node.kubernetes.io/instance-type"] == "t2.medium"
    assert labels["topology.kubernetes.io/zone"] == "us-west-2a"
    assert labels["topology.kubernetes.io/region"] == "us-west-2"
    gpu = next(g.id for g in driver.groups() if g.id.endswith("-pool-3"))
    tpl = driver.template(gpu)
    assert tpl is not None and tpl.capacity["nvidia.com/gpu"] == "1" and tpl.labels["team"] == "ml"
    assert tpl.labels[driver.gpu_label] == "p2.xlarge" and driver.gpu_types() == ["p2.xlarge"]
    # a size the table does not know has no template, unless the pool JSON carries cpu/memory
    emulator.add_pool(CLUSTER, name="new", size="t3.large", min_count=0, max_count=1)
    driver.list_machines()
    unknown = next(g.id for g in driver.groups() if g.id.endswith("-pool-4"))
    assert driver.template(unknown) is None
    emulator.pool_cpu_memory = True  # the switch fills cpu/memory from the table: still unknown
    driver.list_machines()
    assert driver.template(unknown) is None


def test_override_file_replaces_the_pool_listing(emulator: SpcEmulator, tmp_path: Path) -> None:
    listed = list(pools(emulator).values())[:1]
    override = [{**listed[0], "max_count": 3, "cpu": "2", "memory": "4096"}]
    f = tmp_path / "nodepools"
    f.write_text(json.dumps(override))
    driver = make_driver(emulator, options={"node-pools-file": str(f)})
    assert [g.max_size for g in driver.groups()] == [3]  # known at once, no I/O
    emulator.clear_log()
    driver.list_machines()
    assert api_calls(emulator) == [("GET", "nodes")]
    tpl = driver.template(driver.groups()[0].id)
    assert tpl is not None and tpl.capacity["memory"] == "4096Mi"


def test_label_fallbacks_and_control_plane(emulator: SpcEmulator) -> None:
    driver = make_driver(emulator)
    (worker,) = driver.list_machines()
    node = NodeRef(
        "gce://p/z/x",
        "n",
        {"stackpoint.io/instance_id": worker.name, "stackpoint.io/node_group": worker.group},
    )
    assert driver.machine_of(node) == worker.id and driver.group_of(node) == worker.group
    assert driver.group_of(NodeRef("", "n", {"stackpoint.io/node_group": "autoscaling-nope"})) is None
    assert driver.is_control_plane(NodeRef("", "m", {"stackpoint.io/role": "master"}))
    assert driver.is_control_plane(NodeRef("", "m", {"node-role.kubernetes.io/control-plane": ""}))


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (
            {
                "size": "t2.medium",
                "provider_node_id": "i-0dd18342301f04607",
                "location": "us-west-2:us-west-2a",
            },
            "aws:///us-west-2a/i-0dd18342301f04607",
        ),
        (
            {"size": "m5.large", "provider_node_id": "i-038f00f3b164f86bb", "zone": "us-west-2b"},
            "aws:///us-west-2b/i-038f00f3b164f86bb",
        ),
        ({"size": "2gb", "provider_node_id": "123456", "location": "nyc1"}, "digitalocean://123456"),
        ({"size": "n1-standard-1", "provider_node_id": "987", "zone": "us-central1-a"}, None),
        ({"size": "t2.medium", "provider_node_id": "", "zone": "us-west-2a"}, None),
    ],
)
def test_provider_ids_as_each_clouds_kubelet_sets_them(node: dict, expected: str | None) -> None:
    assert derive_provider_id(node) == expected


def test_a_provider_id_template_covers_other_clouds() -> None:
    tpl = parse_template("gce://my-project/{{.Zone}}/{{.Name}}")
    node = {
        "size": "n1-standard-1",
        "instance_id": "spcabc1234-worker-3",
        "zone": "us-central1-a",
        "provider_node_id": "1",
    }
    assert derive_provider_id(node, tpl) == "gce://my-project/us-central1-a/spcabc1234-worker-3"
    assert derive_provider_id({**node, "zone": ""}, tpl) is None
