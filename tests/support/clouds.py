"""Clouds the test process owns, for the probes that must reach into the cloud: inject faults, make one
pool's project refuse us, count what the cloud really holds, or outlive a killed server.

A backend's `BackendUnderTest.cloud` starts one of these (its API emulator on loopback, in the test
process) and says how `cloudprovider-grpc serve` is pointed at it. Backends without a network cloud
(`sim`, whose cloud lives inside the server process) have none; the probes that need one skip them
and say why.

How one group is broken follows what each cloud can really do: Cherry denies one project to the
token's team, Exoscale's IAM policy denies one nodepool, AliCloud's RAM policy denies one scaling
group (all 403, listing and changes alike). Vultr (one account-wide key, one listing for the whole
cluster) and SPC (one Owner token, one node listing per cluster) cannot deny one pool: there the
broken pool is one the cloud refuses to grow (its plan sold out in the region; no capacity for its
instance size), a 400 on its changes while it still lists. `broken_status` says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from cloudprovider_grpc.emulators.faults import FaultPlan
from cloudprovider_grpc.emulators.server import EmulatorServer


class ExternalCloud(Protocol):
    """A running emulated cloud and how to serve against it."""

    #: `serve` flags that select the backend and point it at this cloud
    serve_args: tuple[str, ...]
    #: environment for the server process (tokens the cloud accepts, ...)
    env: Mapping[str, str]
    #: node groups the server will have, with their (min, max)
    groups: Mapping[str, tuple[int, int]]

    def set_faults(self, rate: float, seed: int = 0) -> None:
        """Fail `rate` of the cloud's requests with 5xx (before and after processing), 429, timeouts
        and dropped connections; 0 turns faults off."""

    def set_slow(self, seconds: float) -> None:
        """Answer every request only after `seconds` (longer than the backend's read timeout)."""

    def faults_injected(self) -> int:
        """How many requests met a fault so far (a fault probe that met none proved nothing)."""

    def in_flight(self) -> int:
        """Requests the cloud is handling right now (one held by `set_slow` counts until answered)."""

    def machines(self, group: str) -> list[str]:
        """Ids of the machines the cloud holds for `group`, not counting ones being deleted."""

    #: the HTTP status the broken group's calls get ("403": denied; "400": refused to grow)
    broken_status: str
    #: False when the cloud's create cannot carry an idempotency token (SPC): a create whose answer
    #: was lost is never re-sent (it could double), so after kill -9 it may end one machine short
    #: until CA asks again
    idempotent_creates: bool

    def break_group(self, group: str) -> None:
        """Make `group` fail while the others work: every call about it answers 403 where the cloud
        can deny one group, else its growth is refused (see the module docstring)."""

    def refuse_all(self) -> None:
        """Make every listing fail, so nothing at all can be listed (every project denied, or the
        credential revoked)."""

    def stop(self) -> None: ...


#: client settings for every adapter: fast enough for tests, but real timeouts and retries (a slow
#: fault of 1.5 s outlasts the 1 s read timeout)
_TUNING = {"rate-limit": 200, "read-timeout": 1.0, "connect-timeout": 1.0, "retry-budget": 3.0}


class _Emulated:
    """What every adapter over an `EmulatorServer` shares: faults, slowness, a config file, stop."""

    emulator: EmulatorServer
    tmp: Path
    idempotent_creates = True

    def set_faults(self, rate: float, seed: int = 0) -> None:
        self.emulator.set_faults(FaultPlan(rate=rate, seed=seed, slow_seconds=1.5) if rate else None)

    def set_slow(self, seconds: float) -> None:
        self.emulator.set_faults(FaultPlan(rate=1.0, kinds=("slow",), slow_seconds=seconds))

    def faults_injected(self) -> int:
        return sum(1 for entry in self.emulator.request_log() if entry.fault is not None)

    def in_flight(self) -> int:
        return self.emulator.in_flight()

    def stop(self) -> None:
        self.emulator.stop()

    def _config(self, name: str, doc: Mapping[str, object]) -> Path:
        self.tmp.mkdir(parents=True, exist_ok=True)
        path = self.tmp / f"{name}-probe.yaml"
        path.write_text(yaml.safe_dump(dict(doc)))
        return path


@dataclass
class CherryCloud(_Emulated):
    """The Cherry emulator with two pools in two projects of one team (pool2 in its own project, so
    one project can be made to answer 403 while the other works)."""

    tmp: Path
    token: str = "probe-cherry-token-5e1f"
    state_file: Path | None = None
    env: Mapping[str, str] = field(init=False)
    serve_args: tuple[str, ...] = field(init=False)
    groups: Mapping[str, tuple[int, int]] = field(default_factory=lambda: {"pool1": (1, 10), "pool2": (0, 5)})

    broken_status: str = "403"

    TEAM = 100
    OTHER_TEAM = 999
    PROJECTS = {"pool1": 11, "pool2": 22}

    def __post_init__(self) -> None:
        from cloudprovider_grpc.emulators.cherry import CherryEmulator

        self.emulator = CherryEmulator(
            tokens={self.token: self.TEAM},
            projects={pid: self.TEAM for pid in self.PROJECTS.values()},
            deploy_seconds=0.5,
            state_file=self.state_file,
        ).start()
        self.tmp.mkdir(parents=True, exist_ok=True)
        config = self.tmp / "cherry-probe.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "cluster_name": "probe",
                    "nodes": [f"{lo}:{hi}:{name}" for name, (lo, hi) in self.groups.items()],
                    "cherry": {
                        "api-url": self.emulator.base_url,
                        # fast enough for tests, but real timeouts and retries
                        "rate-limit": 200,
                        "read-timeout": 1.0,
                        "connect-timeout": 1.0,
                        "retry-budget": 3.0,
                        "global": {
                            "project-id": self.PROJECTS["pool1"],
                            "plan": "cloud_vps_4",
                            "region": "eu_nord_1",
                            "os": "ubuntu_24_04",
                        },
                        "pools": {"pool2": {"project-id": self.PROJECTS["pool2"]}},
                    },
                }
            )
        )
        self.serve_args = ("--provider", "cherry", "--config", str(config))
        self.env = {"CHERRY_AUTH_TOKEN": self.token}

    def machines(self, group: str) -> list[str]:
        return [
            str(r["id"])
            for r in self.emulator.server_records(self.PROJECTS[group])
            if r["tags"].get("k8s-nodepool") == group and r.get("terminating_at") is None
        ]

    def break_group(self, group: str) -> None:
        with self.emulator.lock:
            self.emulator.projects[self.PROJECTS[group]] = self.OTHER_TEAM

    def refuse_all(self) -> None:
        for group in self.groups:
            self.break_group(group)


class VultrCloud(_Emulated):
    """The Vultr emulator with one VKE cluster of two autoscaled pools on different plans. VKE keeps
    every pool at one node at least, so each starts with one."""

    token = "probe-vultr-key-5e1f0a2b"
    cluster = "0d5c3e6a-2b7f-4c1d-8e9a-3f4b5c6d7e8f"
    broken_status = "400"

    def __init__(self, tmp: Path, state_file: Path | None = None, pool1_max: int = 12) -> None:
        from cloudprovider_grpc.emulators.vultr import VultrEmulator
        from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool

        self.tmp = tmp
        self.emulator = emu = VultrEmulator(
            tokens=[self.token], provision_seconds=0.5, rate_limit_per_s=None, state_file=state_file
        )
        pools = (
            EmulatorPool(label="pool1", plan="vc2-4c-8gb", node_quantity=1, min_nodes=1, max_nodes=pool1_max),
            EmulatorPool(label="pool2", plan="vc2-2c-4gb", node_quantity=1, min_nodes=1, max_nodes=5),
        )
        ids = emu.add_cluster(self.cluster, pools)
        emu.start()
        self.groups = {pid: (p.min_nodes, p.max_nodes) for pid, p in zip(ids, pools, strict=True)}
        config = self._config(
            "vultr", {"vultr": {"cluster-id": self.cluster, "api-url": emu.base_url, **_TUNING}}
        )
        self.serve_args = ("--provider", "vultr", "--config", str(config))
        self.env = {"VULTR_API_KEY": self.token}

    def machines(self, group: str) -> list[str]:
        return self.emulator.node_ids(group)  # VKE removes a deleted node at once

    def break_group(self, group: str) -> None:
        with self.emulator.lock:  # its plan sold out in the region: VKE refuses to grow it
            self.emulator.stock[self.emulator.pools[group]["plan"]] = 0

    def refuse_all(self) -> None:
        with self.emulator.lock:
            self.emulator.tokens.clear()


class ExoscaleCloud(_Emulated):
    """The Exoscale emulator with one SKS cluster of two empty nodepools (group ids are their
    Instance Pool ids, as in-tree)."""

    key, secret = "EXOprobe0a1b2c3d4e5f60718", "probe-exoscale-secret-5e1f"
    zone = "de-fra-1"
    broken_status = "403"

    def __init__(self, tmp: Path, state_file: Path | None = None, pool1_max: int = 10) -> None:
        from cloudprovider_grpc.emulators.exoscale import ExoscaleEmulator

        self.tmp = tmp
        self.emulator = emu = ExoscaleEmulator(
            zone=self.zone,
            keys={self.key: self.secret},
            boot_seconds=0.5,
            destroy_seconds=0.5,
            state_file=state_file,
        )
        cid = emu.add_cluster("probe")
        bounds = {"pool1": (0, pool1_max), "pool2": (0, 5)}
        self.nodepools: dict[str, str] = {}  # group (instance pool id) -> nodepool id
        self.groups = {}
        for name, (lo, hi) in bounds.items():
            npid, pid = emu.add_nodepool(cid, name, size=0)
            self.nodepools[pid] = npid
            self.groups[pid] = (lo, hi)
        emu.start()
        config = self._config(
            "exoscale",
            {"nodes": [f"{lo}:{hi}:{name}" for name, (lo, hi) in bounds.items()], "exoscale": dict(_TUNING)},
        )
        self.serve_args = ("--provider", "exoscale", "--config", str(config))
        self.env = {
            "EXOSCALE_API_KEY": self.key,
            "EXOSCALE_API_SECRET": self.secret,
            "EXOSCALE_ZONE": self.zone,
            "EXOSCALE_API_ENDPOINT": emu.base_url,
            "EXOSCALE_SKS_CLUSTER": "probe",
        }

    def machines(self, group: str) -> list[str]:
        return [i["id"] for i in self.emulator.pool_members(group) if i["state"] != "destroying"]

    def break_group(self, group: str) -> None:
        with self.emulator.lock:
            self.emulator.denied_resources.add(self.nodepools[group])

    def refuse_all(self) -> None:
        with self.emulator.lock:
            self.emulator.keys.clear()


class AliCloudCloud(_Emulated):
    """The AliCloud emulator with two empty ESS scaling groups, named by `--nodes`."""

    key_id, key_secret = "LTAI5tProbeAccessKeyId01", "probe-alicloud-secret-5e1f"
    region = "cn-hangzhou"
    broken_status = "403"

    def __init__(self, tmp: Path, state_file: Path | None = None) -> None:
        from cloudprovider_grpc.emulators.alicloud import AliCloudEmulator

        self.tmp = tmp
        self.emulator = emu = AliCloudEmulator(
            region=self.region,
            access_keys={self.key_id: self.key_secret},
            pending_seconds=0.5,
            removing_seconds=0.5,
            activity_seconds=0.2,
            state_file=state_file,
        )
        self.groups = {"asg-bp1probegroupa000001": (0, 10), "asg-bp1probegroupb000001": (0, 5)}
        for (gid, (lo, hi)), itype in zip(
            self.groups.items(), ("ecs.g7.xlarge", "ecs.g8y.xlarge"), strict=True
        ):
            config_id = "asc-" + gid.removeprefix("asg-")
            emu.add_group(
                {
                    "ScalingGroupId": gid,
                    "MinSize": lo,
                    "MaxSize": hi,
                    "DesiredCapacity": 0,
                    "ActiveScalingConfigurationId": config_id,
                    "Zones": ["cn-hangzhou-h"],
                    "VSwitchIds": ["vsw-cn-hangzhou-h"],
                }
            )
            emu.add_configuration(
                {"ScalingConfigurationId": config_id, "ScalingGroupId": gid, "InstanceType": itype}
            )
        emu.start()
        config = self._config(
            "alicloud",
            {
                "nodes": [f"{lo}:{hi}:{gid}" for gid, (lo, hi) in self.groups.items()],
                "alicloud": dict(_TUNING),
            },
        )
        self.serve_args = ("--provider", "alicloud", "--config", str(config))
        self.env = {
            "ACCESS_KEY_ID": self.key_id,
            "ACCESS_KEY_SECRET": self.key_secret,
            "REGION_ID": self.region,
            **{f"ALICLOUD_{api}_ENDPOINT": emu.base_url for api in ("ESS", "ECS", "VPC", "STS")},
        }

    def machines(self, group: str) -> list[str]:
        return [
            f"{self.region}.{i['InstanceId']}"  # the providerID CA sees, as the driver writes it
            for i in self.emulator.group_instances(group)
            if not str(i.get("LifecycleState", "")).startswith("Removing")
        ]

    def break_group(self, group: str) -> None:
        with self.emulator.lock:
            self.emulator.denied_groups.add(group)

    def refuse_all(self) -> None:
        with self.emulator.lock:
            self.emulator.keys.clear()


class SpcCloud(_Emulated):
    """The SPC emulator with one cluster of two empty autoscaled pools (AWS instance sizes, so
    nodes carry `aws:///<zone>/<instance id>` providerIDs)."""

    token = "probe-spc-token-5e1f0a2b3c4d"
    org, cluster = 4, 12
    broken_status = "400"
    idempotent_creates = (
        False  # SPC's add body is size, node_count, node_pool: no client token (stackpoint-sdk-go client.go)
    )

    def __init__(self, tmp: Path, state_file: Path | None = None) -> None:
        from cloudprovider_grpc.emulators.spc import SpcEmulator

        self.tmp = tmp
        self.emulator = emu = SpcEmulator(
            tokens={self.token: {self.org}},
            # no draft phase: a node has its provider's instance id (the id CA sees) from the start,
            # so the probes compare ids with the cloud without racing the draft -> building change
            draft_seconds=0.0,
            building_seconds=0.3,
            provisioned_seconds=0.2,
            deleting_seconds=0.5,
            state_file=state_file,
        )
        emu.add_cluster(self.org, self.cluster)
        self.pools: dict[str, int] = {}  # group id -> pool pk
        self.groups = {}
        for name, size, hi in (("pool1", "t2.xlarge", 10), ("pool2", "m4.xlarge", 5)):
            pool = emu.add_pool(self.cluster, name=name, size=size, min_count=0, max_count=hi)
            gid = f"autoscaling-{pool['instance_id']}"
            self.pools[gid] = pool["pk"]
            self.groups[gid] = (0, hi)
        emu.start()
        config = self._config("spc", {"spc": dict(_TUNING)})
        self.serve_args = ("--provider", "spc", "--config", str(config))
        self.env = {
            "CLUSTER_API_TOKEN": self.token,
            "SPC_API_BASE_URL": emu.base_url,
            "ORGANIZATION_ID": str(self.org),
            "CLUSTER_ID": str(self.cluster),
        }

    def machines(self, group: str) -> list[str]:
        """The last segment of the id CA sees: the provider's instance id (the node's SPC name while
        it has none)."""
        return [
            n["provider_node_id"] or n["instance_id"]
            for n in self.emulator.node_records(self.cluster)
            if n.get("pool") == self.pools[group] and n["state"] != "deleting"
        ]

    def break_group(self, group: str) -> None:
        with self.emulator.lock:
            self.emulator.pools[self.pools[group]]["_capacity"] = 0

    def refuse_all(self) -> None:
        with self.emulator.lock:
            self.emulator.tokens.clear()
