"""Every backend, as the suites that hold all backends to the same standard see it.

The probe suite (fuzzing, races, faults, kills, secret scans) and conformance are parametrised over
`BACKENDS`: a new backend joins them by adding one entry here. Each entry
starts the backend with `cloudprovider-grpc serve <serve_args>` against its bundled emulator with no
other configuration (issue "Hostile input": `--emulate` must work alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.clouds import (
    AliCloudCloud,
    CherryCloud,
    ExoscaleCloud,
    ExternalCloud,
    SpcCloud,
    VultrCloud,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFORMANCE = Path(__file__).resolve().parents[2] / "tests" / "conformance"


@dataclass(frozen=True)
class BackendUnderTest:
    """One backend for the cross-backend suites.

    `serve_args` follow `cloudprovider-grpc serve` and select the backend with its emulator.
    `secret_env` names the environment variables that carry the backend's secrets; a suite may set
    them to marker values (the emulator is then seeded to accept them) and scan all output for the
    markers. `shape` is "machines" or "pools" (which machinery serves it). `cloud(tmp_dir, state_file)`
    starts the backend's emulated cloud in the test process (tests/support/clouds.py) for the probes
    that inject faults, break one pool, kill the server or count what the cloud holds; None when the
    backend's cloud lives inside the server process (those probes skip it, saying why)."""

    name: str
    serve_args: tuple[str, ...]
    secret_env: tuple[str, ...] = ()
    shape: str = "machines"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    cloud: Callable[[Path, Path | None], ExternalCloud] | None = None
    #: A two-group end-to-end setup (the per-cloud `test_e2e.py` files drive it): YAML for `serve
    #: --config` that gives the backend (through its emulator) at least the two node groups below,
    #: machines booting within a few seconds. Both groups start at their min size (their base: 0 where
    #: the cloud allows empty groups, 1 on VKE) with room for one more; `e2e_group`'s template differs
    #: from the other groups' in at least one label. `stockout_group` is the cloud's failure path: a
    #: group whose new machines the cloud never creates (an emulator stock of 0, a sim stockout).
    e2e_config: str = ""
    e2e_group: str = ""
    stockout_group: str = ""
    #: YAML for `serve --config` in the conformance run (tests/conformance): node groups whose first
    #: group with room for 4 machines has a min size of at least 1 (the harness provokes the min-size
    #: refusal). Empty: the backend's defaults (the sim cloud's documented demo groups).
    conformance_config: str = ""

    @property
    def id(self) -> str:
        return self.name

    @property
    def provider(self) -> str:
        """The `--provider` it runs (sim-pools is the sim cloud in pool shape)."""
        return self.name.partition("-")[0]


_SIM_E2E = """
sim:
  provisioning_delay: 2
  deletion_delay: 1
  groups:
    - {id: workers, min_size: 0, max_size: 4, instance_type: sim-4x16, capacity: {cpu: "4", memory: 16Gi}}
    - {id: scarce, min_size: 0, max_size: 3, instance_type: sim-4x16s, capacity: {cpu: "4", memory: 16Gi},
       fail: {stockout_after: 0}}
"""

_SIM_POOLS_E2E = _SIM_E2E.replace("sim:\n", "sim:\n  shape: pools\n", 1)

_CHERRY_E2E = """
cluster_name: e2e
nodes: ["0:4:workers", "0:3:scarce"]
cherry:
  global:
    {project-id: 42, plan: cloud_vps_4, region: eu_nord_1, os: ubuntu_24_04,
     hostname-pattern: "{{.NodeGroup}}-{{.RandString8}}"}
  pools: {scarce: {plan: e3_1240v3}}
  emulator: {deploy-seconds: 2, terminate-seconds: 1, stock: {e3_1240v3: {"*": 0}, "*": {"*": 100}}}
"""

_CHERRY_CONFORMANCE = """
provider: cherry
emulate: true
cluster_name: conformance
nodes: ["1:6:workers", "0:3:small"]
cherry:
  global: {project-id: 42, plan: cloud_vps_1, region: eu_nord_1, os: ubuntu_24_04}
  emulator: {deploy-seconds: 0, stock: 20}
"""

#: two VKE pools with fixed ids (the group ids), each at its min of 1 node (VKE never holds a pool below
#: 1); the scarce one's plan is sold out in the location, so its PATCHes up answer 400 (capacity)
VULTR_E2E_WORKERS = "7e2e0000-0000-4000-8000-00000000a001"
VULTR_E2E_SCARCE = "7e2e0000-0000-4000-8000-00000000a002"
_VULTR_E2E = f"""
vultr:
  emulator:
    provision-seconds: 2
    stock: {{vc2-6c-16gb: 0}}
    pools:
      - {{id: {VULTR_E2E_WORKERS}, label: workers, plan: vc2-4c-8gb, node_quantity: 1, min_nodes: 1,
         max_nodes: 4}}
      - {{id: {VULTR_E2E_SCARCE}, label: scarce, plan: vc2-6c-16gb, node_quantity: 1, min_nodes: 1,
         max_nodes: 3}}
"""

#: the emulator's demo cluster: "general" 1..10 with one node first, "highmem" 1..5; nodes boot at once
_VULTR_CONFORMANCE = """
provider: vultr
emulate: true
vultr:
  emulator: {provision_seconds: 0}
"""

_SPC_E2E = """
spc:
  emulator:
    draft-seconds: 1
    building-seconds: 1
    provisioned-seconds: 1
    deleting-seconds: 1
    pools:
      - {name: Workers, instance-size: t2.xlarge, min-count: 0, max-count: 4}
      - {name: Scarce, instance-size: m4.xlarge, min-count: 0, max-count: 3, capacity: 0}
"""

#: two empty SKS nodepools with fixed Instance Pool ids (the group ids); the zone has no capacity left
#: for the scarce one's instance type, so its scale operations fail (reason `unavailable`)
EXOSCALE_E2E_WORKERS = "e2e00000-0000-4000-8000-00000000b001"
EXOSCALE_E2E_SCARCE = "e2e00000-0000-4000-8000-00000000b002"
_EXOSCALE_E2E = f"""
nodes: ["0:4:workers", "0:3:scarce"]
exoscale:
  emulator:
    boot-seconds: 2
    destroy-seconds: 1
    stock: {{standard.large: 0}}
    nodepools:
      - {{name: workers, instance-pool-id: {EXOSCALE_E2E_WORKERS}, instance-type: standard.medium, size: 0,
         labels: {{role: workers}}}}
      - {{name: scarce, instance-pool-id: {EXOSCALE_E2E_SCARCE}, instance-type: standard.large, size: 0,
         labels: {{role: scarce}}}}
"""

#: the demo cluster (its first pool: t2.medium 1..8 with one node), nodes built at once
_SPC_CONFORMANCE = """
provider: spc
emulate: true
spc:
  rate-limit: 1000
  emulator: {draft-seconds: 0, building-seconds: 0, provisioned-seconds: 0, deleting-seconds: 0}
"""

#: two scaling groups seeded in the emulator (each with a `nodepool=<id>` configuration tag, so their
#: templates differ in that label); the scarce one's instance type has no stock, so its scale-outs
#: end as Failed activities (OperationDenied.NoStock)
_ALICLOUD_E2E = """
nodes: ["0:4:asg-bp1e2etstworkers00001", "0:3:asg-bp1e2etstscarce000001"]
alicloud:
  emulator:
    pending-seconds: 2
    removing-seconds: 1
    activity-seconds: 1
    instance-types: {asg-bp1e2etstscarce000001: ecs.g7.2xlarge}
    stock: {ecs.g7.2xlarge: 0, "*": 100}
"""

BACKENDS: tuple[BackendUnderTest, ...] = (
    BackendUnderTest(
        "sim", ("--provider", "sim"), e2e_config=_SIM_E2E, e2e_group="workers", stockout_group="scarce"
    ),
    BackendUnderTest(
        "sim-pools",
        ("--config", str(EXAMPLES / "sim-pools.yaml")),
        shape="pools",
        e2e_config=_SIM_POOLS_E2E,
        e2e_group="workers",
        stockout_group="scarce",
    ),
    BackendUnderTest(
        "cherry",
        ("--provider", "cherry", "--emulate"),
        secret_env=("CHERRY_AUTH_TOKEN", "BOOTSTRAP_TOKEN_SECRET"),
        cloud=lambda tmp, state: CherryCloud(tmp, state_file=state),
        e2e_config=_CHERRY_E2E,
        e2e_group="workers",
        stockout_group="scarce",
        conformance_config=_CHERRY_CONFORMANCE,
    ),
    BackendUnderTest(
        "vultr",
        ("--provider", "vultr", "--emulate"),
        secret_env=("VULTR_API_KEY",),
        shape="pools",
        cloud=VultrCloud,
        conformance_config=_VULTR_CONFORMANCE,
        e2e_config=_VULTR_E2E,
        e2e_group=VULTR_E2E_WORKERS,
        stockout_group=VULTR_E2E_SCARCE,
    ),
    BackendUnderTest(
        "exoscale",
        ("--provider", "exoscale", "--emulate"),
        secret_env=("EXOSCALE_API_KEY", "EXOSCALE_API_SECRET"),
        shape="pools",
        cloud=ExoscaleCloud,
        e2e_config=_EXOSCALE_E2E,
        e2e_group=EXOSCALE_E2E_WORKERS,
        stockout_group=EXOSCALE_E2E_SCARCE,
    ),
    BackendUnderTest(
        "alicloud",
        ("--provider", "alicloud", "--emulate"),
        # both halves of the AccessKey: given alone, one of them is a configuration error
        secret_env=("ACCESS_KEY_ID", "ACCESS_KEY_SECRET"),
        shape="pools",
        cloud=AliCloudCloud,
        e2e_config=_ALICLOUD_E2E,
        e2e_group="asg-bp1e2etstworkers00001",
        stockout_group="asg-bp1e2etstscarce000001",
        conformance_config=(CONFORMANCE / "alicloud-emulate.yaml").read_text(),
    ),
    BackendUnderTest(
        "spc",
        ("--provider", "spc", "--emulate"),
        secret_env=("CLUSTER_API_TOKEN",),
        cloud=SpcCloud,
        e2e_config=_SPC_E2E,
        e2e_group="autoscaling-spc755avwe-pool-1",  # the emulated cluster 1 is spc755avwe
        stockout_group="autoscaling-spc755avwe-pool-2",
        conformance_config=_SPC_CONFORMANCE,
    ),
)


def backend(name: str) -> BackendUnderTest:
    return next(b for b in BACKENDS if b.name == name)
