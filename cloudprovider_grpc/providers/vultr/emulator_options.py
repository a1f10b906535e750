"""How `--emulate` (and `cloudprovider-grpc emulate vultr`) seeds the emulated Vultr API: the
`vultr.emulator` section and its node pools, declared as models (emulators/vultr/ takes these)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from cloudprovider_grpc.emulators.vultr.seed import EmulatorPool
from cloudprovider_grpc.providers.option_models import (
    Count,
    Counts,
    EmulatorRate,
    OptionalCount,
    OptionSection,
    PositiveCount,
    Problem,
    Seconds,
    checked,
    non_empty_list,
)
from cloudprovider_grpc.providers.options import read_mapping

#: cluster and pool ids go into URL paths; VKE's are UUIDs, anything else could escape the path
PATH_SAFE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")


def _nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Problem("missing (a non-empty string)")
    return value


def _taints(value: Any) -> tuple[dict[str, str], ...]:
    taints = value or []
    if not isinstance(taints, list) or not all(isinstance(t, Mapping) and "key" in t for t in taints):
        raise Problem("expected a list of {key, value, effect}")
    return tuple({str(k): str(v) for k, v in t.items()} for t in taints)


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in checked(read_mapping, value).items()}


class PoolOptions(OptionSection):
    """A seeded pool (`vultr.emulator.pools[i]`): the API's own field names, `id` a fixed pool id
    instead of a generated one."""

    model_config = ConfigDict(alias_generator=None)
    UNKNOWN = "key"
    NULL_IS_EMPTY = True

    id: str = ""
    label: Annotated[str, BeforeValidator(_nonempty)] = Field("", validate_default=True)
    plan: Annotated[str, BeforeValidator(_nonempty)] = Field("", validate_default=True)
    node_quantity: PositiveCount = 1
    min_nodes: Count = 1
    max_nodes: PositiveCount = 10
    auto_scaler: Annotated[bool, BeforeValidator(bool)] = True
    labels: Annotated[dict[str, str], BeforeValidator(lambda v: _string_map(v or {}))] = {}
    taints: Annotated[tuple[dict[str, str], ...], BeforeValidator(_taints)] = ()

    @classmethod
    def spell(cls, key: object) -> str:
        return str(key).strip().lower().replace("-", "_")

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: Any) -> str:
        pool_id = str(value or "")
        if pool_id and not PATH_SAFE_ID_RE.match(pool_id):
            raise Problem(f"{pool_id!r} is not a node pool id (a UUID)")
        return pool_id

    @model_validator(mode="after")
    def _bounds(self) -> PoolOptions:
        if self.min_nodes > self.max_nodes:
            raise Problem(f"{self.min_nodes} is above max_nodes {self.max_nodes}", at=("min_nodes",))
        return self

    def seed(self) -> EmulatorPool:
        """The pool as the emulator takes it."""
        return EmulatorPool(**self.model_dump())


class EmulatorOptions(OptionSection):
    """How `--emulate` seeds the emulated cloud (`vultr.emulator`; see providers/vultr/wiring.py)."""

    SUGGEST = True
    AS_WRITTEN = True
    NULL_IS_EMPTY = True

    provision_seconds: Seconds = 5.0
    #: Vultr documents 30 requests/s per IP before 429 (API v2 introduction); 0 or null: no limit
    rate_limit: EmulatorRate = 30.0
    page_size: PositiveCount = 100
    #: nodes the account may run in total; None for no limit (PATCH beyond it answers 400)
    node_limit: OptionalCount = None
    #: plan id -> new nodes of that plan the location can still provide (0: sold out; PATCH growing
    #: a pool of it answers 400); plans not named have no limit
    stock: Counts = {}
    region: Annotated[str, BeforeValidator(lambda v: str(v or "ewr"))] = "ewr"
    #: None: the demo pools
    pools: Annotated[tuple[PoolOptions, ...] | None, non_empty_list("pools")] = None

    @field_validator("pools")
    @classmethod
    def _unique(cls, pools: tuple[PoolOptions, ...] | None) -> tuple[PoolOptions, ...] | None:
        ids = [p.id for p in pools or () if p.id]
        if len(set(ids)) != len(ids):
            raise Problem("two pools have the same id")
        return pools

    def seed_pools(self) -> tuple[EmulatorPool, ...] | None:
        return None if self.pools is None else tuple(p.seed() for p in self.pools)
