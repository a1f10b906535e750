"""The emulated AliCloud region: a small ECS instance-type catalogue and the two demo scaling groups
`serve --provider alicloud --emulate` starts with.

Catalogue entries have the shape of ECS DescribeInstanceTypes (2014-05-26): `InstanceTypeId`,
`CpuCoreCount`, `MemorySize` (GiB, a float: 0.5 exists), `GPUAmount`, `GPUSpec`, `GPUMemorySize`,
`CpuArchitecture` (`X86` or `ARM`), `InstanceTypeFamily`. Sizes follow the vendor's public
instance-family pages; they are illustrative, not a live catalogue.
"""

from __future__ import annotations

from typing import Any


def _type(
    type_id: str,
    cores: int,
    memory: float,
    *,
    gpus: int = 0,
    gpu: str = "",
    gpu_mem: float = 0.0,
    arch: str = "X86",
) -> dict[str, Any]:
    family = ".".join(type_id.split(".")[:2])
    return {
        "InstanceTypeId": type_id,
        "InstanceTypeFamily": family,
        "CpuCoreCount": cores,
        "MemorySize": memory,
        "GPUAmount": gpus,
        "GPUSpec": gpu,
        "GPUMemorySize": gpu_mem,
        "CpuArchitecture": arch,
        "InstanceCategory": "GPU-accelerated" if gpus else "General-purpose",
        "EniQuantity": 4,
    }


INSTANCE_TYPES: list[dict[str, Any]] = [
    _type("ecs.t5-lc2m1.nano", 1, 0.5),
    _type("ecs.c7.large", 2, 4.0),
    _type("ecs.g7.large", 2, 8.0),
    _type("ecs.g7.xlarge", 4, 16.0),
    _type("ecs.g7.2xlarge", 8, 32.0),
    _type("ecs.r7.xlarge", 4, 32.0),
    _type("ecs.g8y.xlarge", 4, 16.0, arch="ARM"),
    _type("ecs.gn6i-c4g1.xlarge", 4, 15.0, gpus=1, gpu="NVIDIA T4", gpu_mem=16.0),
    _type("ecs.gn7i-c8g1.2xlarge", 8, 30.0, gpus=1, gpu="NVIDIA A10", gpu_mem=24.0),
    _type("ecs.gn6v-c8g1.2xlarge", 8, 32.0, gpus=1, gpu="NVIDIA V100", gpu_mem=16.0),
]

ZONES = ("cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j")

#: the demo groups (ids shaped like real ESS ids: `asg-` and lowercase alphanumerics)
DEMO_GROUPS: list[dict[str, Any]] = [
    {
        "ScalingGroupId": "asg-bp1demogeneral000001",
        "ScalingGroupName": "demo-general",
        "MinSize": 0,
        "MaxSize": 10,
        "DesiredCapacity": 1,
        "EnableDesiredCapacity": True,
        "ActiveScalingConfigurationId": "asc-bp1demogeneral000001",
        "VSwitchIds": ["vsw-bp1demo00000000000h"],
        "Zones": ["cn-hangzhou-h"],
    },
    {
        "ScalingGroupId": "asg-bp1demogpu00000000001",
        "ScalingGroupName": "demo-gpu",
        "MinSize": 0,
        "MaxSize": 4,
        "DesiredCapacity": 0,
        "EnableDesiredCapacity": True,
        "ActiveScalingConfigurationId": "asc-bp1demogpu00000000001",
        "VSwitchIds": ["vsw-bp1demo00000000000i"],
        "Zones": ["cn-hangzhou-i"],
    },
]

DEMO_CONFIGURATIONS: list[dict[str, Any]] = [
    {
        "ScalingConfigurationId": "asc-bp1demogeneral000001",
        "ScalingGroupId": "asg-bp1demogeneral000001",
        "ScalingConfigurationName": "demo-general",
        "InstanceType": "ecs.g7.xlarge",
        "InstanceTypes": ["ecs.g7.xlarge"],
        "ImageId": "aliyun_3_x64_20G_alibase_20240819.vhd",
        "SystemDiskSize": 120,
        "LifecycleState": "Active",
        "Tags": [{"Key": "workload", "Value": "general"}],
    },
    {
        "ScalingConfigurationId": "asc-bp1demogpu00000000001",
        "ScalingGroupId": "asg-bp1demogpu00000000001",
        "ScalingConfigurationName": "demo-gpu",
        "InstanceType": "ecs.gn6i-c4g1.xlarge",
        "InstanceTypes": ["ecs.gn6i-c4g1.xlarge"],
        "ImageId": "aliyun_3_x64_20G_alibase_20240819.vhd",
        "SystemDiskSize": 200,
        "LifecycleState": "Active",
        "Tags": [
            {"Key": "workload", "Value": "gpu"},
            {
                "Key": "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu",
                "Value": "present:NoSchedule",
            },
        ],
    },
]
