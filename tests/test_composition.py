"""The shared machinery and the simulator's engine are composed of parts held as fields, not
stacked mixins: no class there has more than four of the project's own classes among its bases
(its MRO, itself excluded; `typing.Generic`, `abc.ABC`, `object` and other libraries' classes do not
count). Every module of both packages is imported, so a class added anywhere there is checked."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

PACKAGES = ("cloudprovider_grpc.providers.machinery", "cloudprovider_grpc.simulator.engine")
PROJECT = "cloudprovider_grpc"
#: the most project base classes one class may have
MAX_BASES = 4


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        found.append(importlib.import_module(info.name))
    return found


def _project_bases(cls: type) -> list[str]:
    return [
        f"{base.__module__}.{base.__qualname__}"
        for base in cls.__mro__[1:]
        if base.__module__ == PROJECT or base.__module__.startswith(f"{PROJECT}.")
    ]


def _classes() -> dict[str, type]:
    classes: dict[str, type] = {}
    for package in PACKAGES:
        for module in _modules(package):
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ == module.__name__:  # defined here, not imported
                    classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return classes


def test_every_module_of_both_packages_is_seen() -> None:
    names = {m.__name__ for p in PACKAGES for m in _modules(p)}
    assert "cloudprovider_grpc.providers.machinery.pools.provider" in names
    assert "cloudprovider_grpc.providers.machinery.machines.provider" in names
    assert any(n.startswith("cloudprovider_grpc.simulator.engine.") for n in names)
    assert len(_classes()) > 20


def test_no_class_has_more_than_four_project_base_classes() -> None:
    over = {
        name: bases
        for name, cls in sorted(_classes().items())
        if len(bases := _project_bases(cls)) > MAX_BASES
    }
    assert not over, "classes with more than four project base classes: " + "; ".join(
        f"{name} ({len(bases)}: {', '.join(bases)})" for name, bases in over.items()
    )


def test_the_providers_stand_on_one_base_each() -> None:
    """The two shapes are `GroupProvider` subclasses, and `GroupProvider` implements the contract."""
    from cloudprovider_grpc.providers.machinery.machines.provider import MachineProvider
    from cloudprovider_grpc.providers.machinery.pools.provider import PoolProvider

    contract = "cloudprovider_grpc.providers.contract.CloudProvider"
    group = "cloudprovider_grpc.providers.machinery.base.GroupProvider"
    assert _project_bases(MachineProvider) == [group, contract]
    assert _project_bases(PoolProvider) == [group, contract]
