"""pydantic's validation errors as the ConfigErrors the CLI prints: every problem, each naming its
key, and an unknown key ("Extra inputs are not permitted") with the nearest key the model knows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from cloudprovider_grpc.core.errors import ConfigError, unknown_key


def known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys `model` accepts at `loc` (a path through nested models; list items are skipped)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        annotation = getattr(field, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            current = annotation
            continue
        inner = [
            a for a in getattr(annotation, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not inner:  # e.g. list[GroupModel]: the item's model
            return []
        current = inner[0]
    return list(getattr(current, "model_fields", {}))


def problems(
    exc: ValidationError, model: type[BaseModel], *, prefix: str = "", extra_keys: Iterable[str] = ()
) -> list[ConfigError]:
    """One ConfigError per error of `exc` (raised validating `model`), keys prefixed with `prefix`."""
    found = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join([prefix, *map(str, loc)] if prefix else map(str, loc)) or prefix or "config"
        if err["type"] == "extra_forbidden" and loc:
            known = known_keys(model, loc[:-1])
            found.append(unknown_key(where, str(loc[-1]), [*known, *(extra_keys if len(loc) == 1 else ())]))
        elif err["type"] == "missing":
            found.append(ConfigError(where, "required, not given"))
        else:
            found.append(ConfigError(where, err["msg"].removeprefix("Value error, ")))
    return found
