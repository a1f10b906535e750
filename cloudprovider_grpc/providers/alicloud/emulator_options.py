"""How `--emulate` (and `cloudprovider-grpc emulate alicloud`) seeds the emulated AliCloud APIs: the
`alicloud.emulator` section, declared as a model (emulators/alicloud/ takes these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator

from cloudprovider_grpc.providers.option_models import (
    EmulatorRate,
    OptionSection,
    Problem,
    Seconds,
)


def _stock(value: Any) -> dict[str, int]:
    raw = {"*": value} if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(raw, Mapping):
        raise Problem("expected a number or {instance-type: quantity}")
    for t, q in raw.items():
        if not isinstance(q, int) or isinstance(q, bool) or q < 0:
            raise Problem(f"expected a non-negative integer, got {q!r}", at=(str(t),))
    return {str(t): q for t, q in raw.items()}


def _sts_duration(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise Problem(f"expected a positive integer, got {value!r}")
    return value


def _instance_types(value: Any) -> dict[str, str]:
    types = value or {}
    if not isinstance(types, Mapping) or not all(isinstance(v, str) and v for v in types.values()):
        raise Problem("expected {scaling-group-id: instance-type}")
    return {str(k): str(v) for k, v in types.items()}


class EmulatorOptions(OptionSection):
    """How `--emulate` seeds the emulated cloud (`alicloud.emulator`; providers/alicloud/wiring.py)."""

    SUGGEST = True
    NULL_IS_EMPTY = True

    pending_seconds: Seconds = 5.0
    removing_seconds: Seconds = 3.0
    activity_seconds: Seconds = 1.0
    rate_limit: EmulatorRate = None
    #: instance type -> instances the emulated region can still create ("*": any type); a number
    #: alone is the stock of any type
    stock: Annotated[dict[str, int], BeforeValidator(_stock)] = {"*": 1000}
    sts_duration: Annotated[int, BeforeValidator(_sts_duration)] = 3600
    #: scaling group id -> the instance type of the configuration the emulator seeds for it
    #: (default ecs.g7.xlarge); with `stock` this makes one group's scale-outs fail
    instance_types: Annotated[dict[str, str], BeforeValidator(_instance_types)] = {}
