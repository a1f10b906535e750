"""The emulated Exoscale catalogue (instance types) and the demo cloud `--emulate` starts with.

Instance-type shapes follow the OpenAPI `instance-type` schema python-exoscale ships (`id`, `family`,
`size`, `cpus`, `gpus`, `memory` in bytes, `authorized`, `zones`); the family and size names are the
schema's enums. The figures are illustrative (a plausible catalogue), not a copy of the live one,
which the backend always reads from the API. `gpus` is left out when zero: the schema makes it
strictly positive.
"""

from __future__ import annotations

from typing import Any

GiB = 1024**3
MiB = 1024**2

#: (family, size, cpus, memory bytes, gpus)
_TYPES: list[tuple[str, str, int, int, int]] = [
    ("standard", "micro", 1, 512 * MiB, 0),
    ("standard", "tiny", 1, 1 * GiB, 0),
    ("standard", "small", 2, 2 * GiB, 0),
    ("standard", "medium", 2, 4 * GiB, 0),
    ("standard", "large", 4, 8 * GiB, 0),
    ("standard", "extra-large", 4, 16 * GiB, 0),
    ("standard", "huge", 8, 32 * GiB, 0),
    ("standard", "mega", 12, 64 * GiB, 0),
    ("cpu", "extra-large", 16, 32 * GiB, 0),
    ("memory", "huge", 4, 64 * GiB, 0),
    ("gpua5000", "small", 12, 56 * GiB, 1),
    ("gpua5000", "medium", 16, 90 * GiB, 2),
]


def instance_types(zone: str) -> list[dict[str, Any]]:
    """The catalogue with stable ids (so a restarted emulator and a state file agree)."""
    out: list[dict[str, Any]] = []
    for n, (family, size, cpus, memory, gpus) in enumerate(_TYPES, start=1):
        item: dict[str, Any] = {
            "id": f"b6cd1ff5-3a2f-4e9d-a4d1-{n:012x}",
            "family": family,
            "size": size,
            "cpus": cpus,
            "memory": memory,
            "authorized": True,
            "zones": [zone],
        }
        if gpus:
            item["gpus"] = gpus
        out.append(item)
    return out


#: one template (Exoscale's SKS node image) every emulated pool uses
TEMPLATE_ID = "4a8e7f3c-0d5b-4f61-9a2e-000000000001"

#: the demo cloud: an SKS cluster with two nodepools and one standalone Instance Pool
DEMO_CLUSTER = "demo"
DEMO_NODEPOOLS: list[dict[str, Any]] = [
    {
        "name": "workers",
        "type": "standard.medium",
        "size": 2,
        "labels": {"role": "workers"},
        "taints": {},
    },
    {
        "name": "gpu",
        "type": "gpua5000.small",
        # one node: a nodepool found without a --nodes spec has min size 1 (in-tree's default), and a
        # demo group below its own min would look broken; `--nodes 0:N:gpu` shows scale-from-zero
        "size": 1,
        "labels": {"role": "gpu"},
        "taints": {"nvidia.com/gpu": {"value": "present", "effect": "NoSchedule"}},
    },
]
DEMO_POOLS: list[dict[str, Any]] = [{"name": "batch", "type": "standard.small", "size": 1}]
