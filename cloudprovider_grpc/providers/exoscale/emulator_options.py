"""How `--emulate` (and `cloudprovider-grpc emulate exoscale`) seeds the emulated Exoscale API: the
`exoscale.emulator` section and its SKS nodepools, declared as models (emulators/exoscale/ takes
these)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.emulators.exoscale.seed import instance_types
from cloudprovider_grpc.providers.option_models import (
    Count,
    EmulatorRate,
    OptionSection,
    Problem,
    Seconds,
    checked,
    non_empty_list,
)
from cloudprovider_grpc.providers.options import read_int

#: used only with --emulate when the environment names no zone/key/secret (a demo cloud)
EMULATOR_ZONE = "ch-gva-2"


_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def _uuid(value: Any) -> str:
    if value is not None and not _UUID_RE.match(str(value)):
        raise Problem(f"{value!r} is not a lower-case UUID")
    return str(value or "")


def _name(value: Any) -> str:
    name = str(value or "").strip()
    if not name:
        raise Problem("missing (a non-empty string)")
    return name


def _labels(value: Any) -> dict[str, str]:
    labels = value or {}
    if not isinstance(labels, Mapping):
        raise Problem("expected a mapping of strings")
    return {str(k): str(v) for k, v in labels.items()}


def _taints(value: Any) -> dict[str, dict[str, str]]:
    taints = value or {}
    if not isinstance(taints, Mapping) or not all(
        isinstance(t, Mapping) and t.get("effect", "NoSchedule") in _TAINT_EFFECTS for t in taints.values()
    ):
        raise Problem("expected {key: {value, effect}} with a Kubernetes taint effect")
    return {
        str(k): {"value": str(t.get("value") or ""), "effect": str(t.get("effect") or "NoSchedule")}
        for k, t in taints.items()
    }


def _type_name(value: Any, at: tuple[str, ...] = ()) -> str:
    known = sorted(f"{t['family']}.{t['size']}" for t in instance_types(EMULATOR_ZONE))
    name = str(value or "").strip()
    if name not in known:
        raise Problem(f"{name!r} is not an emulated instance type (known: {', '.join(known)})", at=at)
    return name


_Uuid = Annotated[str, BeforeValidator(_uuid)]


class NodepoolOptions(OptionSection):
    """A seeded nodepool (`exoscale.emulator.nodepools[i]`): the API's field names (`instance-type`
    by `<family>.<size>`, `taints` as the API's {key: {value, effect}} map), plus fixed ids so a seed
    can name its node groups."""

    UNKNOWN = "key"
    SUGGEST = True
    NULL_IS_EMPTY = True

    id: _Uuid = ""
    instance_pool_id: _Uuid = ""
    name: Annotated[str, BeforeValidator(_name)] = Field("", validate_default=True)
    instance_type: Annotated[str, BeforeValidator(_type_name)] = "standard.medium"
    size: Count = 0
    labels: Annotated[dict[str, str], BeforeValidator(_labels)] = {}
    taints: Annotated[dict[str, dict[str, str]], BeforeValidator(_taints)] = {}

    def entry(self) -> dict[str, Any]:
        """The nodepool in the shape the emulator's `seed_demo` takes."""
        return {
            "id": self.id,
            "instance-pool-id": self.instance_pool_id,
            "name": self.name,
            "type": self.instance_type,
            "size": self.size,
            "labels": dict(self.labels),
            "taints": {k: dict(t) for k, t in self.taints.items()},
        }


def _one_of(*allowed: str) -> BeforeValidator:
    def check(value: Any) -> str:
        if str(value) not in allowed:
            raise Problem(f"{str(value)!r} is not {' or '.join(repr(a) for a in allowed)}")
        return str(value)

    return BeforeValidator(check)


def _auth_status(value: Any) -> int:
    status = int(checked(read_int, value))
    if status not in (401, 403):
        raise Problem(f"must be 401 or 403, got {status}")
    return status


def _demo(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Problem(f"expected true or false, got {value!r}")
    return value


def _stock(value: Any) -> dict[str, int]:
    raw = value or {}
    if not isinstance(raw, Mapping):
        raise Problem("expected a mapping of instance type -> count")
    out = {}
    for k, v in raw.items():
        try:
            out[_type_name(k, (str(k),))] = int(read_int(v, ""))
        except ConfigError as exc:
            raise Problem(exc.problem, at=(str(k),)) from None
    return out


class EmulatorOptions(OptionSection):
    """How `--emulate` seeds the emulated cloud (`exoscale.emulator`; providers/exoscale/wiring.py)."""

    NULL_IS_EMPTY = True

    boot_seconds: Seconds = 5.0
    destroy_seconds: Seconds = 2.0
    operation_polls: Count = 1
    operation_seconds: Seconds = 0.0
    quota_limit: Annotated[int, BeforeValidator(lambda v: int(checked(read_int, v, minimum=-1)))] = 50
    quota_mode: Annotated[str, _one_of("operation", "reject")] = "operation"
    conflict_mode: Annotated[str, _one_of("accept", "reject")] = "accept"
    auth_failure_status: Annotated[int, BeforeValidator(_auth_status)] = 403
    rate_limit: EmulatorRate = None
    #: seed the demo SKS cluster (two nodepools) and standalone pool
    demo: Annotated[bool, BeforeValidator(_demo)] = True
    #: instance type (`<family>.<size>`) -> instances of it the zone can still create (0: none; a
    #: scale-up beyond it fails its operation, reason `unavailable`); types not named have no limit
    stock: Annotated[dict[str, int], BeforeValidator(_stock)] = {}
    #: nodepools seeded instead of the demo's; None: the demo cloud
    nodepools: Annotated[tuple[NodepoolOptions, ...] | None, non_empty_list("nodepools", null=True)] = None

    @field_validator("nodepools")
    @classmethod
    def _unique(cls, pools: tuple[NodepoolOptions, ...] | None) -> tuple[NodepoolOptions, ...] | None:
        for key in ("name", "id", "instance_pool_id"):
            values = [getattr(n, key) for n in pools or () if getattr(n, key)]
            if len(set(values)) != len(values):
                raise Problem(f"two nodepools have the same {key.replace('_', '-')}")
        return pools

    def seed_nodepools(self) -> list[dict[str, Any]] | None:
        """The nodepools in the shape the emulator's `seed_demo` takes; None: the demo's."""
        return None if self.nodepools is None else [n.entry() for n in self.nodepools]
