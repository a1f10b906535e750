"""The emulated StackPointCloud's demo data: one AWS cluster with two autoscaled pools.

Shapes follow the API docs' and the NKS SDK's fixtures (stackpoint-api-docs `_nodes.md`,
`_nodepools.md`; NetApp/nks-sdk-go `mock_data/nodes.json`, `nodepools.json`): ids `spc` + 7
lowercase alphanumerics, pools `<cluster>-pool-<n>`, nodes `<cluster>-worker-<n>` /
`-master-<n>`, `location` `us-west-2:us-west-2a`, AWS instance ids `i-` + 17 hex digits.
"""

from __future__ import annotations

import hashlib
import random
import string
from typing import Any

DEMO_PROVIDER = "aws"
DEMO_REGION = "us-west-2"
DEMO_ZONE = "us-west-2a"

#: pools of the demo cluster: (name, instance size, min, max, running workers, autoscaled)
DEMO_POOLS: tuple[tuple[str, str, int, int, int, bool], ...] = (
    ("Default Worker Pool", "t2.medium", 1, 8, 1, True),
    ("Large Pool", "m4.xlarge", 0, 4, 0, True),
)
DEMO_MASTER_SIZE = "t2.medium"


def cluster_instance_id(cluster_pk: int) -> str:
    """`spc` + 7 lowercase alphanumerics, deterministic per cluster pk."""
    rng = random.Random(f"spc-cluster-{cluster_pk}")
    return "spc" + "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(7))


def aws_instance_id(cluster_pk: int, node_pk: int) -> str:
    return "i-" + hashlib.sha256(f"{cluster_pk}/{node_pk}".encode()).hexdigest()[:17]


def private_ip(node_pk: int) -> str:
    return f"172.23.{4 + node_pk // 250 % 200}.{node_pk % 250 + 4}"


def provider_instances(provider: str) -> list[dict[str, Any]]:
    """GET /meta/provider-instances?provider=<p> (NKS SDK `mach_specs.go`): one object per provider
    whose `config` maps each instance size to {cpu, memory, name}."""
    from cloudprovider_grpc.formats.spc_machine_specs import MACHINE_SPECS

    family = {"aws": "aws", "gce": "gce", "gke": "gce", "do": "digitalocean", "azure": "azure"}.get(
        provider, provider
    )
    config = {
        size: {"cpu": spec.cpu, "memory": spec.memory_mb, "name": size}
        for size, spec in MACHINE_SPECS.items()
        if spec.cloud == family
    }
    return [{"name": provider, "filters": {}, "config": config}]
