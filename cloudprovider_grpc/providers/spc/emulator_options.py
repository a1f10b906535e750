"""How `--emulate` (and `cloudprovider-grpc emulate spc`) seeds the emulated StackPointCloud API: the
`spc.emulator` section and its pools, declared as models (emulators/spc/ takes these)."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_validator

from cloudprovider_grpc.providers.option_models import (
    EmulatorRate,
    OptionSection,
    Problem,
    Seconds,
)
from cloudprovider_grpc.providers.options import norm_key


def _non_negative(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise Problem(f"expected a non-negative integer, got {v!r}")
    return v


class EmulatorPool(OptionSection):
    """One node pool of the emulated cluster (`spc.emulator.pools`)."""

    name: str = ""
    #: required: the pools list hands every item one, so a missing size is told as "missing"
    instance_size: str = ""
    min_count: int = 0
    max_count: int = 0
    running: int = 0
    autoscaled: bool = True
    labels: str = ""
    gpu_instance_size: str = ""
    gpu_core_count: int | None = None
    #: most nodes the emulated provider can build for this pool (None: unlimited; 0: a stockout)
    capacity: int | None = None

    UNKNOWN = "key"

    @field_validator("instance_size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> str:
        size = str(v or "").strip()
        if not size:
            raise Problem("missing")
        return size

    @field_validator("min_count", "max_count", "running", mode="before")
    @classmethod
    def _count(cls, v: Any) -> int:
        return _non_negative(v)

    @field_validator("capacity", "gpu_core_count", mode="before")
    @classmethod
    def _optional_count(cls, v: Any) -> int | None:
        return None if v is None else _non_negative(v)

    @field_validator("autoscaled", mode="before")
    @classmethod
    def _flag(cls, v: Any) -> bool:
        return bool(v)

    @field_validator("name", "labels", "gpu_instance_size", mode="before")
    @classmethod
    def _text(cls, v: Any) -> str:
        return str(v or "")

    @model_validator(mode="after")
    def _bounds(self) -> EmulatorPool:
        if self.min_count > self.max_count:
            raise Problem(f"{self.min_count} is above max-count {self.max_count}", at=("min-count",))
        return self


class EmulatorOptions(OptionSection):
    """How `--emulate` runs the emulated SPC API (emulators/spc/emulator.py). Seconds per state;
    the fork's logs show minutes in reality (a 1-node scale-up took about 15 min, §B5)."""

    draft_seconds: Seconds = 2.0
    building_seconds: Seconds = 3.0
    provisioned_seconds: Seconds = 2.0
    deleting_seconds: Seconds = 3.0
    #: include `cpu`/`memory` in pool JSON (the documented pool JSON has neither, §B2)
    pool_cpu_memory: bool = False
    rate_limit: EmulatorRate = None
    #: the emulated cluster's pools; empty: the demo cluster's two autoscaled AWS pools
    pools: tuple[EmulatorPool, ...] = ()

    @field_validator("pool_cpu_memory", mode="before")
    @classmethod
    def _flag(cls, v: Any) -> bool:
        return bool(v)

    @field_validator("pools", mode="before")
    @classmethod
    def _pools(cls, v: Any) -> list[Any]:
        if not isinstance(v, list):
            raise Problem("expected a list of pools ({name, instance-size, min-count, max-count, running})")
        named = []
        for i, item in enumerate(v):  # an unnamed pool is "Pool <n>", as the emulator's demo names them
            if isinstance(item, dict):
                item = {norm_key(k): value for k, value in item.items()}
                item["name"] = item.get("name") or f"Pool {i + 1}"
                item.setdefault("instance-size", "")
            named.append(item)
        return named
