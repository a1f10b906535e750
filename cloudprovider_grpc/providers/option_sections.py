"""A backend's YAML section declared as a pydantic model, with the errors options.py always gave.

A cloud's section (`vultr:`, `exoscale:`, `alicloud:`) is a `Section` subclass: every option with its
type, range and default, nested models for the emulator's knobs. The value types below run the shared
readers of options.py, so a bad value reads exactly as it did when each cloud parsed its mapping by
hand; `section_problems` turns pydantic's ValidationError into those ConfigErrors, each naming its key
(`vultr.emulator.pools[0].plan`). What does not come from the YAML section (environment variables,
secret files, the in-tree cloud-config, --nodes) stays with each cloud's loader in its config.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from cloudprovider_grpc.core.errors import ConfigError, unknown_key
from cloudprovider_grpc.providers.options import (
    ClientTuning,
    norm_key,
    read_float,
    read_int,
    read_mapping,
    read_reserved,
)


def problem(text: str, key: str = "") -> PydanticCustomError:
    """A validation failure carrying our own wording; `key` is appended to the failing field's key
    (".min_nodes" for a check of the whole pool that blames one of its fields)."""
    return PydanticCustomError("config", "{problem}", {"problem": text, "key": key})


def read_value(read: Callable[..., Any], value: Any, **kwargs: Any) -> Any:
    """`read(value, '', **kwargs)`, its ConfigError as a validation failure."""
    try:
        return read(value, "", **kwargs)
    except ConfigError as exc:
        raise problem(exc.problem, exc.key) from None


def reader(read: Callable[..., Any], **kwargs: Any) -> BeforeValidator:
    """A field validator from one of options.py's readers (called with an empty key: the key a
    reader appends for a nested value, as `read_reserved` does, is kept)."""
    return BeforeValidator(lambda value: read_value(read, value, **kwargs))


def optional(read: Callable[..., Any], **kwargs: Any) -> BeforeValidator:
    """Like `reader`, with null accepted as None."""
    return BeforeValidator(lambda value: None if value is None else read_value(read, value, **kwargs))


def non_empty_list(what: str, *, null: bool = False) -> BeforeValidator:
    """A list of at least one item (`null`: or null, meaning "none given")."""

    def check(value: Any) -> Any:
        if (value is not None or not null) and (not isinstance(value, list) or not value):
            raise problem(f"expected a non-empty list of {what}")
        return value

    return BeforeValidator(check)


def _optional_rate(value: Any) -> float | None:
    """0 or null: no limit."""
    return float(read_value(read_float, value, allow_zero=False)) if value else None


#: seconds, rates and other numbers of at least 0
NonNegative = Annotated[float, reader(read_float)]
#: an emulator's request rate; 0 or null for none
OptionalRate = Annotated[float | None, BeforeValidator(_optional_rate)]
#: whole numbers of at least 0, of at least 1
Count = Annotated[int, reader(read_int)]
PositiveCount = Annotated[int, reader(read_int, minimum=1)]
#: resource name -> Kubernetes quantity
Reserved = Annotated[dict[str, str], reader(read_reserved)]
#: a string; null is ""
Text = Annotated[str, BeforeValidator(lambda value: "" if value is None else str(value))]


def _keyed(value: Any) -> dict[str, int]:
    """Each count's problem names its key (`stock.vc2-1c-2gb`)."""
    out = {}
    for k, v in read_value(read_mapping, value or {}).items():
        try:
            out[str(k)] = read_int(v, "")
        except ConfigError as exc:
            raise problem(exc.problem, f".{k}") from None
    return out


#: name -> a whole number of at least 0 (an emulator's stock per plan or type)
Counts = Annotated[dict[str, int], BeforeValidator(_keyed)]


#: a nested section where any empty value (`[]`, `""`, `0`) means "all defaults"
EMPTY_IS_DEFAULT = BeforeValidator(lambda value: value or {})


def _dashed(name: str) -> str:
    return name.replace("_", "-")


class Section(BaseModel):
    """A mapping of options whose keys may be written with `-` or `_`, in any case (`norm_key`).
    An unknown key is an error naming it (a typo must not fall back to a default silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=_dashed, populate_by_name=True)

    #: what an unknown key is called, whether the nearest known key is suggested, and whether the
    #: error names the key as written (else as `spell` spells it)
    UNKNOWN: ClassVar[str] = "option"
    SUGGEST: ClassVar[bool] = True
    AS_WRITTEN: ClassVar[bool] = False

    @classmethod
    def spell(cls, key: object) -> str:
        """A key as the model's aliases spell it."""
        return norm_key(key)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.alias or name for name, f in cls.model_fields.items()]

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise problem("expected a mapping")
        known = cls.keys()
        out: dict[str, Any] = {}
        for raw, item in value.items():
            key = cls.spell(raw)
            if key not in known:
                if cls.SUGGEST:
                    text = unknown_key("", key, known, what=cls.UNKNOWN).problem
                else:
                    text = f"unknown {cls.UNKNOWN} (known: {', '.join(sorted(known))})"
                raise problem(text, f".{raw}" if cls.AS_WRITTEN else f".{key}")
            out[key] = item
        return out


_Tuned = Annotated[float | None, reader(read_float, allow_zero=False)]


class TunedSection(Section):
    """A section with the HTTP client tuning every cloud client takes (options.ClientTuning); a key
    left out keeps the cloud's own default."""

    connect_timeout: _Tuned = None
    read_timeout: _Tuned = None
    retries: Annotated[int | None, reader(read_int)] = None
    retry_budget: _Tuned = None
    #: null: no client-side limit
    rate_limit: Annotated[float | None, optional(read_float, allow_zero=False)] = None
    catalog_ttl: Annotated[float | None, reader(read_float)] = None

    def tuning(self, defaults: ClientTuning) -> ClientTuning:
        """`defaults` with the keys the section sets (`rate-limit: null`: no limit)."""
        names = [f.name for f in dataclasses.fields(ClientTuning)]
        return dataclasses.replace(
            defaults, **{n: getattr(self, n) for n in names if n in self.model_fields_set}
        )


def section_problems(exc: ValidationError, prefix: str) -> list[ConfigError]:
    """One ConfigError per error of `exc`, keyed `prefix.key.list[0].key` as the CLI prints them."""
    found = []
    for err in exc.errors():
        where = prefix
        for part in err["loc"]:
            where += f"[{part}]" if isinstance(part, int) else f".{part}"
        ctx = err.get("ctx") or {}
        if err["type"] == "config":
            found.append(ConfigError(where + str(ctx.get("key", "")), str(ctx["problem"])))
        else:
            found.append(ConfigError(where, err["msg"].removeprefix("Value error, ")))
    return found
