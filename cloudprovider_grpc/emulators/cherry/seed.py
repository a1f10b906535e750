"""The emulated Cherry Servers catalogue: regions, images and plans in the API's JSON shapes.

Shapes follow the official SDK's fixtures
(cherryservers/cherryservers-sdk-python:tests/unit/plans/conftest.py and
cherryservers/cherryservers-sdk-python:tests/unit/servers/conftest.py) and cherrygo's types. Figures
are illustrative, not a live price list. Plan `e5_1620v4` carries id 113 so the in-tree example
cloud-config (`plan=113`) works against the emulator. Like the API's, plan specs carry no GPU entry:
a pool's GPUs come from its config (`gpu-count`, `gpu-type`).
"""

from __future__ import annotations

from typing import Any

REGIONS: list[dict[str, Any]] = [
    {
        "id": 1,
        "name": "EU-Nord-1",
        "slug": "eu_nord_1",
        "region_iso_2": "LT",
        "location": "Lithuania, Šiauliai",
    },
    {
        "id": 2,
        "name": "EU-West-1",
        "slug": "eu_west_1",
        "region_iso_2": "NL",
        "location": "Netherlands, Amsterdam",
    },
    {
        "id": 3,
        "name": "US-Chicago-1",
        "slug": "us_chicago_1",
        "region_iso_2": "US",
        "location": "USA, Chicago",
    },
    {
        "id": 4,
        "name": "AS-Singapore-1",
        "slug": "as_singapore_1",
        "region_iso_2": "SG",
        "location": "Singapore",
    },
]

IMAGES: list[dict[str, str]] = [
    {"slug": "ubuntu_18_04", "name": "Ubuntu 18.04 64bit"},
    {"slug": "ubuntu_22_04", "name": "Ubuntu 22.04 64bit"},
    {"slug": "ubuntu_24_04", "name": "Ubuntu 24.04 64bit"},
    {"slug": "debian_12_64bit", "name": "Debian 12 64bit"},
    {"slug": "fedora_41_64bit", "name": "Fedora 41 64bit"},
]


def _plan(
    pid: int,
    slug: str,
    name: str,
    kind: str,
    cores: int,
    memory_gb: int,
    hourly: float,
    disk_gb: int,
    gpu: bool = False,
) -> dict[str, Any]:
    specs: dict[str, Any] = {
        "cpus": {"count": 1, "name": name, "cores": cores, "frequency": 3.4, "unit": "GHz"},
        "memory": {"count": 1, "total": memory_gb, "unit": "GB", "name": f"{memory_gb}GB"},
        "storage": [{"count": 1, "name": f"SSD {disk_gb}GB", "size": disk_gb, "unit": "GB", "type": "SSD"}],
        "nics": {"name": "1Gbps"},
        "bandwidth": {"name": "30TB"},
    }
    return {
        "id": pid,
        "href": f"/plans/{slug}",
        "name": name,
        "slug": slug,
        "title": name,
        "type": kind,
        "category": "gpu" if gpu else ("Shared resources" if kind == "vps" else "lightweight"),
        "specs": specs,
        "pricing": [
            {"id": 3, "unit": "Monthly", "price": round(hourly * 730, 2), "currency": "EUR", "taxed": False},
            {"id": 37, "unit": "Hourly", "price": hourly, "currency": "EUR", "taxed": False},
            {
                "id": 38,
                "unit": "Spot hourly",
                "price": round(hourly * 0.8, 4),
                "currency": "EUR",
                "taxed": False,
            },
        ],
    }


PLANS: list[dict[str, Any]] = [
    _plan(625, "cloud_vps_1", "Cloud VPS 1", "vps", 1, 1, 0.0182, 20),
    _plan(628, "cloud_vps_4", "Cloud VPS 4", "vps", 4, 8, 0.0912, 80),
    _plan(86, "e3_1240v3", "E3-1240v3", "baremetal", 4, 16, 0.1016, 250),
    _plan(113, "e5_1620v4", "E5-1620v4", "baremetal", 8, 64, 0.2466, 500),
    _plan(162, "amd_epyc_7402p", "AMD EPYC 7402P", "baremetal", 24, 128, 0.5342, 1000),
    _plan(901, "gpu_a2_1", "GPU A2", "baremetal", 16, 64, 1.1, 1000, gpu=True),
]
