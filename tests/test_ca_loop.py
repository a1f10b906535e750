"""The replayed CA loop (`conformance loop`, which benchmarks/ca_loop.py times) makes the calls of
CA 1.36.1's pattern, and what it reports is what reached the server.

A small cluster: two groups with nodes, one empty group, nodes in no group, one instance that never
registers. Per loop: NodeGroupNodes only in the first loop, once more in the loop after the group's
deletion and every 2 minutes of simulated time (the background refresh); NodeGroupForNode once per
node in a group and, per node in no group, six times as CA 1.36 asks (five on 1.35, four on 1.34);
TemplateNodeInfo only for the empty group; GetAvailableGPUTypes never; the unregistered instance
deleted through a fake node in the first loop; the price expander's stabilization pod and its calls
per group. Counts, not timings: the server's own RPC counters must equal the client's report."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.support import conformance, gotools
from tests.support.servers import sim_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = [
    {"id": "big", "min_size": 0, "max_size": 10, "initial_size": 3, "price_per_hour": 0.2},
    {"id": "small", "min_size": 0, "max_size": 10, "initial_size": 2, "price_per_hour": 0.1},
    {"id": "empty", "min_size": 0, "max_size": 10, "initial_size": 0, "price_per_hour": 0.4},
]
GROUPED, UNGROUPED = 5, 5  # -non-autoscaled-share 0.5
LOOPS = 14  # at a 10 s scan interval the background refresh runs beside loop 12
LINE = re.compile(r'^cloudprovider_grpc_rpc_requests_total\{code="[A-Z_]+",method="(\w+)"\} (\S+)$')


def _client() -> Path:
    if gotools.go_binary() is None:
        if gotools.in_ci():
            pytest.fail("the CA loop cannot run in CI: no Go toolchain")
        pytest.skip("no Go toolchain; install Go >= 1.26 to build the conformance client")
    return conformance.client()


def served(metrics_port: int) -> Counter[str]:
    """Calls the server counted per RPC, every status code together."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if m := LINE.match(line):
            counts[m.group(1)] += int(float(m.group(2)))
    return counts


def replay(client: Path, port: int, tmp_path: Path, *flags: str) -> dict:
    config = tmp_path / "cloud-config.yaml"
    config.write_text(f'address: "127.0.0.1:{port}"\ngrpc_timeout: 5s\n')
    proc = subprocess.run(
        [str(client), "loop", "-cloud-config", str(config), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def loop_calls(report: dict, rpc: str) -> list[int]:
    return [loop.get(rpc, 0) for loop in report["calls"]]


@pytest.mark.timeout(1200)  # a cold build of the client takes minutes on 2 cores
@pytest.mark.parametrize("shape", ["machines", "pools"])
@pytest.mark.parametrize("delay", [0, 3600], ids=["instance-running", "instance-creating"])
def test_the_replayed_loop_makes_cas_calls_and_reports_what_reached_the_server(
    shape: str, delay: int, tmp_path: Path
) -> None:
    """`shape`: the machinery serving the backend (machines or node pools); `delay`: the unregistered
    instance is listed running, or still creating. Either way CA's fake node must find it."""
    client = _client()
    options = {"shape": shape, "provisioning_delay": delay, "groups": GROUPS}
    with sim_server(options) as handle:
        before = served(handle.metrics_port)
        flags = ["-loops", str(LOOPS), "-non-autoscaled-share", "0.5", "-unregistered", "1"]
        report = replay(client, handle.port, tmp_path, *flags, "-price-expander", "-pending-pods", "2")
        after = served(handle.metrics_port)

    cluster = (report["nodes"], report["non_autoscaled"], report["groups"])
    assert cluster == (GROUPED + UNGROUPED, UNGROUPED, 3)
    assert len(report["calls"]) == len(report["seconds"]) == LOOPS
    every = [1] * LOOPS
    assert loop_calls(report, "Refresh") == every
    assert loop_calls(report, "NodeGroups") == every
    # the instance cache: every group in the first loop (plus the deletion's check), the deleted-from
    # group again in the next, then nothing until the background refresh 2 minutes in
    nodes = [0] * LOOPS
    nodes[0], nodes[1], nodes[12] = 3 + 1, 1, 3
    assert loop_calls(report, "NodeGroupNodes") == nodes
    # nodes in no group: six asks each, every loop (the client caches no empty answer); the fake
    # node of the unregistered instance asked once, in the first loop
    for_node = [GROUPED + 6 * UNGROUPED] * LOOPS
    for_node[0] += 1
    assert loop_calls(report, "NodeGroupForNode") == for_node
    # templates only for the group with no node to copy
    assert loop_calls(report, "NodeGroupTemplateNodeInfo") == every
    options = [4 * GROUPED] * LOOPS
    options[0] += 2  # the deletion: the fake node's group's provision time, then zero-or-max scaling
    assert loop_calls(report, "NodeGroupGetOptions") == options
    targets = [3 * 3] * LOOPS
    targets[0] += 2  # the deletion's, then the check's
    assert loop_calls(report, "NodeGroupTargetSize") == targets
    first_only = [1] + [0] * (LOOPS - 1)
    assert loop_calls(report, "GPULabel") == first_only
    assert loop_calls(report, "GetAvailableGPUTypes") == [0] * LOOPS  # asked on scale-ups and deletions only
    # the instance that never registered: deleted through one fake node in the first loop, and the
    # server found it by its providerID (the client checks the target size and the listing)
    assert loop_calls(report, "NodeGroupDeleteNodes") == first_only
    assert report["fake_nodes_deleted"] == 1
    assert loop_calls(report, "PricingNodePrice") == [3] * LOOPS
    assert loop_calls(report, "PricingPodPrice") == [1 + 3 * 2] * LOOPS  # the stabilization pod first

    reported: Counter[str] = Counter(report["setup_calls"])
    for loop in report["calls"]:
        reported.update(loop)
    assert +(after - before) == +reported


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("release", "asks"), [("1.36", 6), ("1.35", 5), ("1.34", 4)])
def test_nodes_in_no_group_are_asked_as_each_release_asks(release: str, asks: int, tmp_path: Path) -> None:
    client = _client()
    with sim_server({"provisioning_delay": 0, "groups": GROUPS}) as handle:
        flags = ["-loops", "2", "-non-autoscaled-share", "0.5", "-ca", release]
        report = replay(client, handle.port, tmp_path, *flags)
    assert loop_calls(report, "NodeGroupForNode") == [GROUPED + asks * UNGROUPED] * 2


def test_csi_aware_scheduling_asks_each_node_groups_object_for_its_template(tmp_path: Path) -> None:
    client = _client()
    with sim_server({"provisioning_delay": 0, "groups": GROUPS}) as handle:
        report = replay(client, handle.port, tmp_path, "-loops", "2", "-csi-aware")
    # one per node in a group (each NodeGroupForNode answer is a group object of its own) and the
    # empty group's
    assert loop_calls(report, "NodeGroupTemplateNodeInfo") == [GROUPED + 1] * 2
    assert loop_calls(report, "NodeGroupForNode") == [GROUPED] * 2
