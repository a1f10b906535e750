"""The `sim` backend (in-memory cloud); see cloud.py. `build(ctx)` is the registry entry point."""

from __future__ import annotations

from pydantic import ValidationError

from cloudprovider_grpc.core.errors import raise_all
from cloudprovider_grpc.core.pydantic_errors import problems
from cloudprovider_grpc.providers.registry import BuiltDriver, ProviderContext
from cloudprovider_grpc.providers.sim.cloud import DEMO_GROUPS, SimCloud, SimDriver, SimOptions, SimPoolDriver

__all__ = ["SimCloud", "SimDriver", "SimOptions", "SimPoolDriver", "build_driver", "parse_options"]


def parse_options(ctx: ProviderContext) -> SimOptions:
    """The sim section of the config, with `--nodes MIN:MAX:NAME` adding default-shaped groups.

    With neither groups nor --nodes, the three demo groups are served."""
    raw = dict(ctx.options)
    groups = list(raw.get("groups") or [])
    for spec in ctx.nodes:
        groups.append(
            {
                "id": spec.name,
                "min_size": spec.min_size,
                "max_size": spec.max_size,
                "initial_size": spec.min_size,
            }
        )
    if not groups:
        groups = [dict(g) for g in DEMO_GROUPS]
    raw["groups"] = groups
    try:
        return SimOptions.model_validate(raw)
    except ValidationError as exc:
        raise_all(problems(exc, SimOptions, prefix="sim"))
        raise


def build_driver(ctx: ProviderContext) -> BuiltDriver:
    cloud = SimCloud(parse_options(ctx), clock=ctx.clock.now if ctx.clock is not None else None)
    driver = SimPoolDriver(cloud) if cloud.options.shape == "pools" else SimDriver(cloud)
    return BuiltDriver(driver, seed=cloud.options.seed)
