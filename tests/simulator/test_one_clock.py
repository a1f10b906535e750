"""One clock for a simulation: every emulated cloud boots, deletes and rate-limits on the
simulator's virtual clock, and the backend's own waits (back-offs, rate-limit tokens) cost
simulated time, so `simulate --help`'s example registers its nodes on every backend and gives a
byte-identical report.json run after run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cloudprovider_grpc.cli import main
from cloudprovider_grpc.emulators.vultr import VultrEmulator
from cloudprovider_grpc.http import BearerAuth, HttpClient, RetryPolicy
from cloudprovider_grpc.providers.registry import simulated_timings
from cloudprovider_grpc.simulator.clock import VirtualClock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BACKENDS = ["vultr", "cherry", "exoscale", "alicloud", "spc"]


@pytest.mark.unit
def test_a_wait_shorter_than_the_float_spacing_still_moves_virtual_time() -> None:
    """A token bucket's last sliver of a token once made its waiter spin forever at a late `t`."""
    clock = VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))
    clock.set(7000.0)
    before = clock.t
    clock.sleep(1e-15)
    assert clock.t > before and clock.waited > 0
    clock.set(10.0)  # a backend that waited past the next loop keeps the clock where it is
    assert clock.t > 7000.0


@pytest.mark.integration
def test_the_emulators_rate_limit_and_the_clients_back_off_run_on_the_virtual_clock() -> None:
    """Over real HTTP on loopback: the emulator allows one request per simulated second, so the
    second request at the same simulated instant is refused (429); the client backs off on the same
    clock, which moves simulated time on until the emulator lets it through."""
    clock = VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))
    emu = VultrEmulator(tokens=["t"], rate_limit_per_s=1.0, clock=clock).start()
    try:
        emu.add_cluster("c1")
        http = HttpClient(
            "vultr", emu.base_url, auth=BearerAuth("t"), retry=RetryPolicy(retries=6), clock=clock
        )
        path = "kubernetes/clusters/c1/node-pools"
        assert http.request("GET", path, operation="list").status == 200
        assert http.request("GET", path, operation="list").status == 200
        log = emu.request_log()
        statuses = [e.status for e in log]
        assert statuses[0] == 200 and 429 in statuses and statuses[-1] == 200
        # the answer that got through came a simulated second or more after the first one
        assert log[-1].time - log[0].time >= 1.0
        assert clock.waited >= 1.0
    finally:
        emu.stop()


def _help_example(provider: str, out: Path) -> dict:
    """The help's example, simulated for half an hour instead of its default two: its scale-up and
    the nodes' registration happen in the first minutes, and the other ninety minutes add loops, not
    decisions: the half hour costs 40 % of the CPU time."""
    args = ["simulate", "--from-dump", str(EXAMPLES / "snapshot" / "cluster.json"), "--provider", provider]
    what = ["--emulate", "--scale", "deployment/web=2x", "--duration", "30m"]
    assert main([*args, *what, "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "report.json").read_text())


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("provider", BACKENDS)
def test_the_help_example_registers_its_nodes_and_repeats_to_the_byte(provider, tmp_path, capsys) -> None:
    report = _help_example(provider, tmp_path / "a")
    again = _help_example(provider, tmp_path / "b")
    assert (tmp_path / "a" / "report.json").read_bytes() == (tmp_path / "b" / "report.json").read_bytes()
    assert report == again
    kinds = {d["kind"] for d in report["decisions"]}
    # nodes the cloud boots register in time: none times out, none is deleted as unregistered
    assert not kinds & {"scale-up-timeout", "delete-unregistered", "loop-aborted"}, kinds
    s = report["summary"]
    if s["max_pending_pods"]:
        assert s["nodes_added"] > 0
        registered = [line for line in report["log"] if "registered (" in line]
        assert len(registered) >= s["nodes_added"]
    assert report["timeline"]["pending"][-1] == 0, "pending pods are left at the end"
    # the cloud's simulated boot time is what the pods waited for, and the report says so
    boot = sum(
        v for k, v in simulated_timings(provider).items() if not k.startswith(("delet", "remov", "destr"))
    )
    if s["nodes_added"]:
        assert s["pod_pending_seconds"]["max"] >= boot
    assert any(n.startswith(f"the emulated {provider} cloud runs on simulated time") for n in report["notes"])
    assert not any("overran CA's 5 s deadline" in n for n in report["notes"])
