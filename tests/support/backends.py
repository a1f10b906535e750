"""Every backend, as the suites that hold all backends to the same standard see it.

The probe suite (fuzzing, races, faults, kills, secret scans), conformance and the real-CA end-to-end
tests are parametrised over `BACKENDS`: a new backend joins them by adding one entry here. Each entry
starts the backend with `cloudprovider-grpc serve <serve_args>` against its bundled emulator with no
other configuration (issue "Hostile input": `--emulate` must work alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass(frozen=True)
class BackendUnderTest:
    """One backend for the cross-backend suites.

    `serve_args` follow `cloudprovider-grpc serve` and select the backend with its emulator.
    `secret_env` names the environment variables that carry the backend's secrets; a suite may set
    them to marker values (the emulator is then seeded to accept them) and scan all output for the
    markers. `shape` is "machines" or "pools" (which machinery serves it)."""

    name: str
    serve_args: tuple[str, ...]
    secret_env: tuple[str, ...] = ()
    shape: str = "machines"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: The real cluster-autoscaler end-to-end run (tests/realca): YAML for `serve --config` that gives
    #: the backend (through its emulator) at least the two node groups below, machines booting within
    #: a few seconds. `e2e_group` must hold 0 machines at start and have room for 2; its template
    #: must differ from the other groups' in at least one label (the scenario pins pods with it).
    #: `stockout_group` is the cloud's failure path: a group whose machines the cloud never creates
    #: (an emulator stock of 0, a sim stockout), which CA must back off from. Empty `e2e_config`
    #: keeps the backend out of the real-CA run (say why in a comment on the entry).
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
cluster_name: realca
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
        e2e_config=_CHERRY_E2E,
        e2e_group="workers",
        stockout_group="scarce",
        conformance_config=_CHERRY_CONFORMANCE,
    ),
    BackendUnderTest(
        "vultr", ("--provider", "vultr", "--emulate"), secret_env=("VULTR_API_KEY",), shape="pools"
    ),
    BackendUnderTest(
        "exoscale",
        ("--provider", "exoscale", "--emulate"),
        secret_env=("EXOSCALE_API_KEY", "EXOSCALE_API_SECRET"),
        shape="pools",
    ),
    BackendUnderTest(
        "alicloud",
        ("--provider", "alicloud", "--emulate"),
        secret_env=("ACCESS_KEY_SECRET",),
        shape="pools",
        extra_env={"ACCESS_KEY_ID": "LTAI5tProbeAccessKey0001", "REGION_ID": "cn-hangzhou"},
    ),
    BackendUnderTest("spc", ("--provider", "spc", "--emulate"), secret_env=("CLUSTER_API_TOKEN",)),
)


def backend(name: str) -> BackendUnderTest:
    return next(b for b in BACKENDS if b.name == name)
