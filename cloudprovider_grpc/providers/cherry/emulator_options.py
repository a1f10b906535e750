"""How `--emulate` (and `cloudprovider-grpc emulate cherry`) seeds the emulated Cherry Servers API:
the `cherry.emulator` section, declared as a model (emulators/cherry/emulator.py takes these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator

from cloudprovider_grpc.providers.option_models import EmulatorRate, OptionSection, Problem, Seconds


class EmulatorOptions(OptionSection):
    """How `--emulate` seeds the emulated cloud (emulators/cherry/emulator.py)."""

    deploy_seconds: Seconds = 5.0
    terminate_seconds: Seconds = 0.0
    rate_limit: EmulatorRate = None
    #: plan (slug or id) -> region -> quantity; "*" keys apply to every plan/region
    stock: Mapping[str, Mapping[str, int]] = Field(default_factory=lambda: {"*": {"*": 100}})

    @field_validator("stock", mode="before")
    @classmethod
    def _stock(cls, value: Any) -> dict[str, dict[str, int]]:
        """A number (every plan in every region), or per plan a number or {region: quantity}."""
        if isinstance(value, int) and not isinstance(value, bool):
            return {"*": {"*": value}}
        if not isinstance(value, Mapping):
            raise Problem("expected a number or {plan: {region: quantity}}")
        out: dict[str, dict[str, int]] = {}
        for plan, regions in value.items():
            if isinstance(regions, int) and not isinstance(regions, bool):
                out[str(plan)] = {"*": regions}
                continue
            if not isinstance(regions, Mapping):
                raise Problem("expected a number or {region: quantity}", at=(str(plan),))
            for region, qty in regions.items():
                if not isinstance(qty, int) or isinstance(qty, bool) or qty < 0:
                    raise Problem(
                        f"expected a non-negative integer, got {qty!r}", at=(str(plan), str(region))
                    )
                out.setdefault(str(plan), {})[str(region)] = qty
        return out
