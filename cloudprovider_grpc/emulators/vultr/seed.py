"""The emulated Vultr catalogue and demo cluster, in the API's JSON shapes.

Plan fields follow GET /v2/plans (govultr plans.go, the API v2 docs): `id`, `vcpu_count`, `ram`
(MB), `disk` (GB), `disk_count`, `bandwidth` (GB), `monthly_cost` (USD), `type`, `locations`, and
for GPU plans `gpu_vram_gb` and `gpu_type`. Ids are real plan ids (`vc2-1c-2gb` has 2048 MB in the
API's GET /v2/plans); the prices are illustrative, not a live price list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EmulatorPool:
    """One node pool the emulator seeds into the cluster (see emulator_seed.DEMO_POOLS). `id` fixes
    the pool id (the node group id), so tests and demos can name the group; "" generates one."""

    label: str
    plan: str
    node_quantity: int = 1
    min_nodes: int = 1
    max_nodes: int = 10
    auto_scaler: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    id: str = ""


_LOCATIONS = ["ewr", "ord", "dfw", "sea", "lax", "ams", "fra", "sgp"]


def _plan(pid: str, vcpu: int, ram_mb: int, disk: int, cost: float, kind: str, **gpu: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "id": pid,
        "vcpu_count": vcpu,
        "ram": ram_mb,
        "disk": disk,
        "disk_count": 1,
        "bandwidth": 1024 * max(1, vcpu),
        "monthly_cost": cost,
        "type": kind,
        "locations": list(_LOCATIONS),
    }
    plan.update(gpu)
    return plan


PLANS: list[dict[str, Any]] = [
    _plan("vc2-1c-2gb", 1, 2048, 55, 10.0, "vc2"),
    _plan("vc2-2c-4gb", 2, 4096, 80, 20.0, "vc2"),
    _plan("vc2-4c-8gb", 4, 8192, 160, 40.0, "vc2"),
    _plan("vc2-6c-16gb", 6, 16384, 320, 80.0, "vc2"),
    _plan("vc2-8c-32gb", 8, 32768, 640, 160.0, "vc2"),
    _plan("vhf-4c-16gb", 4, 16384, 384, 96.0, "vhf"),
    _plan("voc-m-4c-32gb-160s", 4, 32768, 160, 155.0, "voc"),
    _plan("vcg-a16-6c-64g-16vram", 6, 65536, 350, 500.0, "vcg", gpu_vram_gb=16, gpu_type="NVIDIA_A16"),
    _plan(
        "vcg-a100-12c-120g-80vram", 12, 122880, 1400, 1750.0, "vcg", gpu_vram_gb=80, gpu_type="NVIDIA_A100"
    ),
]

#: the demo cluster of `serve --provider vultr --emulate` with no other configuration: two
#: autoscaled pools and one fixed pool (auto_scaler false: never a node group)
DEMO_POOLS: tuple[EmulatorPool, ...] = (
    EmulatorPool(label="general", plan="vc2-4c-8gb", node_quantity=1, min_nodes=1, max_nodes=10),
    EmulatorPool(
        label="highmem",
        plan="voc-m-4c-32gb-160s",
        node_quantity=1,
        min_nodes=1,
        max_nodes=5,
        labels={"workload": "memory"},
        taints=({"key": "dedicated", "value": "memory", "effect": "NoSchedule"},),
    ),
    EmulatorPool(
        label="system", plan="vc2-2c-4gb", node_quantity=2, min_nodes=2, max_nodes=2, auto_scaler=False
    ),
)
