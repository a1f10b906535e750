"""The instance sizes StackPointCloud's Go SDK knew, as data: CPU count, memory in MB, cloud.

SPC's node-pool JSON carries only `instance_size`; the SDK filled the pool's `cpu` and `memory` from
a client-side table keyed by that size (StackPointCloud/stackpoint-sdk-go
`pkg/stackpointio/machine_specs.go` at b87d5ae, read through the justinhopper fork). The figures
below are that table's facts: the fork's template used them as `cpu` cores and `memory` MB x 2^20,
so memory is kept in MiB here. The `cloud` column is ours: it
names the provider whose catalogue each size comes from (AWS EC2, Google Compute Engine,
DigitalOcean, Azure), inferred from the size names; sizes whose provider we could not identify
with certainty ("M".."4XL", the ProfitBricks-style spec string) are `other`. It decides how a
node's providerID is derived (see `providerid.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

AWS = "aws"
GCE = "gce"
DIGITALOCEAN = "digitalocean"
AZURE = "azure"
OTHER = "other"


@dataclass(frozen=True)
class MachineSpec:
    cpu: int
    memory_mb: int
    cloud: str


def _family(cloud: str, rows: dict[str, tuple[int, int]]) -> dict[str, MachineSpec]:
    return {size: MachineSpec(cpu, mem, cloud) for size, (cpu, mem) in rows.items()}


MACHINE_SPECS: dict[str, MachineSpec] = {
    **_family(
        GCE,
        {
            "n1-standard-1": (1, 3750),
            "n1-standard-2": (2, 7500),
            "n1-standard-4": (4, 15000),
            "n1-standard-8": (8, 30000),
            "n1-standard-16": (16, 60000),
            "n1-standard-32": (32, 120000),
            "n1-standard-64": (64, 240000),
            "n1-highmem-2": (2, 13000),
            "n1-highmem-4": (4, 26000),
            "n1-highmem-8": (8, 52000),
            "n1-highmem-16": (16, 104000),
            "n1-highmem-32": (32, 208000),
            "n1-highmem-64": (64, 416000),
            "n1-highcpu-2": (2, 1800),
            "n1-highcpu-4": (4, 3600),
            "n1-highcpu-8": (8, 7200),
            "n1-highcpu-16": (16, 14400),
            "n1-highcpu-32": (32, 28800),
            "n1-highcpu-64": (64, 57600),
        },
    ),
    **_family(
        AWS,
        {
            "t2.medium": (2, 4000),
            "t2.large": (2, 8000),
            "t2.xlarge": (4, 16000),
            "t2.2xlarge": (8, 32000),
            "c4.large": (2, 3750),
            "c4.xlarge": (4, 7500),
            "c4.2xlarge": (8, 15000),
            "c4.4xlarge": (16, 30000),
            "c4.8xlarge": (36, 60000),
            "m3.large": (2, 7500),
            "m3.xlarge": (4, 15000),
            "m3.2xlarge": (8, 30000),
            "m4.large": (2, 8000),
            "m4.xlarge": (4, 16000),
            "m4.2xlarge": (8, 32000),
            "m4.4xlarge": (16, 64000),
            "m4.10xlarge": (40, 160000),
            "m4.16xlarge": (64, 256000),
        },
    ),
    **_family(
        DIGITALOCEAN,
        {
            "2gb": (2, 2000),
            "4gb": (2, 4000),
            "8gb": (4, 8000),
            "16gb": (8, 16000),
            "32gb": (12, 32000),
            "48gb": (16, 32000),
            "64gb": (20, 64000),
            "c-2": (2, 3000),
            "c-4": (4, 6000),
            "c-8": (8, 12000),
            "c-16": (16, 32000),
            "c-32": (32, 64000),
            "m-16gb": (2, 16000),
            "m-32gb": (4, 32000),
            "m-64gb": (8, 64000),
            "m-128gb": (16, 128000),
            "m-224gb": (32, 224000),
        },
    ),
    **_family(
        OTHER,
        {
            "M": (1, 2000),
            "L": (2, 2000),
            "XL": (2, 4000),
            "XXL": (4, 8000),
            "3XL": (8, 16000),
            "4XL": (12, 32000),
            "2,INTEL_XEON,4096,50,SSD": (2, 4000),
        },
    ),
    **_family(
        AZURE,
        {
            "standard_a2": (2, 3500),
            "standard_a3": (4, 7000),
            "standard_a4": (8, 14000),
            "standard_a5": (2, 14000),
            "standard_a6": (4, 28000),
            "standard_a7": (8, 56000),
            "standard_a8": (8, 56000),
            "standard_a9": (16, 112000),
            "standard_a10": (8, 56000),
            "standard_a11": (16, 112000),
            "basic_a2": (2, 3500),
            "basic_a3": (4, 7000),
            "basic_a4": (8, 14000),
            "standard_a2_v2": (2, 4000),
            "standard_a4_v2": (4, 8000),
            "standard_a8_v2": (8, 16000),
            "standard_a2m_v2": (2, 16000),
            "standard_a4m_v2": (4, 32000),
            "standard_a8m_v2": (8, 64000),
            "standard_d1": (1, 3500),
            "standard_d2": (2, 7000),
            "standard_d3": (4, 14000),
            "standard_d4": (8, 28000),
            "standard_d11": (2, 14000),
            "standard_d12": (4, 28000),
            "standard_d13": (8, 56000),
            "standard_d14": (16, 112000),
            "standard_ds1": (1, 3500),
            "standard_ds2": (2, 7000),
            "standard_ds3": (4, 14000),
            "standard_ds4": (8, 28000),
            "standard_d1_v2": (1, 3500),
            "standard_d2_v2": (2, 7000),
            "standard_d3_v2": (4, 14000),
            "standard_d4_v2": (8, 28000),
            "standard_d5_v2": (16, 56000),
            "standard_d11_v2": (2, 14000),
            "standard_d12_v2": (4, 28000),
            "standard_d13_v2": (8, 56000),
            "standard_d14_v2": (16, 112000),
            "standard_d15_v2": (20, 140000),
            "standard_ds1_v2": (1, 3500),
            "standard_ds2_v2": (2, 7000),
            "standard_ds3_v2": (4, 14000),
            "standard_ds4_v2": (8, 28000),
            "standard_ds5_v2": (16, 56000),
            "standard_ds11_v2": (2, 14000),
            "standard_ds12_v2": (4, 28000),
            "standard_ds13_v2": (8, 56000),
            "standard_ds14_v2": (16, 112000),
            "standard_ds15_v2": (20, 140000),
            "standard_f1": (1, 2000),
            "standard_f2": (2, 4000),
            "standard_f4": (4, 8000),
            "standard_f8": (8, 16000),
            "standard_f16": (16, 32000),
            "standard_f1s": (1, 2000),
            "standard_f2s": (2, 4000),
            "standard_f4s": (4, 8000),
            "standard_f8s": (8, 16000),
            "standard_f16s": (16, 32000),
            "standard_g1": (2, 28000),
            "standard_g2": (4, 56000),
            "standard_g3": (8, 112000),
            "standard_g4": (16, 224000),
            "standard_g5": (32, 448000),
            "standard_gs1": (2, 28000),
            "standard_gs2": (4, 56000),
            "standard_gs3": (8, 112000),
            "standard_gs4": (16, 224000),
            "standard_gs5": (32, 448000),
        },
    ),
}


def spec_of(size: str) -> MachineSpec | None:
    """The table's entry for an instance size (exact, as the SDK looked it up), or None."""
    return MACHINE_SPECS.get(size)
