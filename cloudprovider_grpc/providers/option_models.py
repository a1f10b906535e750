"""pydantic building blocks for a cloud's own configuration section, shared by the cloud packages.

A cloud declares its options as models built on `OptionSection`: every key with its type, range and
default. The spellings users write are the field's aliases: a key is accepted with dashes or
underscores and in any case (`read_timeout`, `Read-Timeout`: `read-timeout`), and an environment
variable read in a key's place is a further alias, spelt as the variable is (`ORGANIZATION_ID`).
The words a user reads are the project's, not pydantic's: a validator raises `Problem(text)` and
`problems`/`told_in_order` turn the ValidationError into the `ConfigError(key, problem)` lines the
CLI prints, the key found from the error's location by the cloud's own `where` (a value read from
a cloud-config file is named by its file section, one from the environment by its variable);
`problems` gives every problem at once, `told_in_order`/`first_problem` the order a cloud always
told them in, `validated` the phases a cloud always checked them in (`raise_by_phase`). A value
a loader read from an in-tree file is one more alias, named as its errors name it (`cloud-config
token`); `model_input` gathers the section and the variables, `where_in` names a location. How an
unknown key is worded (`UNKNOWN`, `SUGGEST`, `AS_WRITTEN`) is each model's choice, so every cloud
keeps its words. The shared value types (`Seconds`, `Timeout`,
`EmulatorRate`, `Count`, `Counts`, `Reserved`, ...) and `TuningOptions` reuse providers/options.py's
readers, so their words are the same for every cloud.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator

from cloudprovider_grpc.core.errors import ConfigError, did_you_mean, raise_all, unknown_key
from cloudprovider_grpc.providers.options import (
    ClientTuning,
    norm_key,
    read_float,
    read_int,
    read_mapping,
    read_reserved,
)

Loc = tuple[str | int, ...]


class Problem(ValueError):
    """A validator's finding in the user's words. `at` extends the error's location (an unknown
    key, or the field a check across fields blames); `key` names an input outside the section
    (an environment variable) instead of the location."""

    def __init__(self, problem: str, *, at: Loc = (), key: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.at = at
        self.key = key


def checked(read: Callable[..., Any], value: Any, **kwargs: Any) -> Any:
    """One of providers/options.py's readers run inside a validator: its ConfigError becomes this
    field's Problem with the same words (a reader that names a sub-key, like `reserved.cpu`,
    keeps it)."""
    try:
        return read(value, "", **kwargs)
    except ConfigError as exc:
        raise Problem(exc.problem, at=(exc.key[1:],) if exc.key else ()) from None


def dotted(prefix: str, loc: Loc) -> str:
    """`spc.emulator.pools[0].min-count`: keys joined by dots, list positions in brackets."""
    text = prefix
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def problems(exc: ValidationError, where: Callable[[Loc], str]) -> list[ConfigError]:
    """One ConfigError per error of `exc`, in validation order (the fields' declared order)."""
    found = []
    for err in exc.errors():
        cause = err.get("ctx", {}).get("error")
        loc = tuple(err["loc"])
        if isinstance(cause, Problem):
            found.append(ConfigError(cause.key or where(loc + cause.at), cause.problem))
        else:  # a type no loader produces; pydantic's own words
            found.append(ConfigError(where(loc), err["msg"]))
    return found


def raise_by_phase(
    exc: ValidationError,
    where: Callable[[Loc], str],
    model: type[OptionSection],
    phases: Sequence[Collection[str]],
) -> None:
    """Raise the problems of the first phase (a set of fields) that has any, all of them at once: the
    order in which a cloud always checked its inputs (an unknown key before everything). Nothing
    when no phase has a problem."""
    told = [
        (p, model.field_of(tuple(e["loc"]))) for p, e in zip(problems(exc, where), exc.errors(), strict=True)
    ]
    for phase in [{None}, *phases]:
        raise_all([problem for problem, name in told if name in phase])


M = TypeVar("M", bound="OptionSection")


def validated(
    model: type[M],
    given: Any,
    prefix: str,
    *,
    context: Mapping[str, Any],
    section: Collection[str],
    phases: Sequence[Collection[str]],
    file_problem: ConfigError | None = None,
) -> M:
    """`given` validated by `model`, its problems told in the order a cloud always checked its
    inputs: an unknown key, the section's own keys (`section`, every problem at once), the problem
    of the in-tree file a loader could not read (`file_problem`), then each of `phases`."""
    try:
        options = model.model_validate(given, context=dict(context))
    except ValidationError as exc:
        where = where_in(model, prefix)
        raise_by_phase(exc, where, model, [section])
        if file_problem is not None:
            raise file_problem from None
        raise_by_phase(exc, where, model, phases)
        raise_all(problems(exc, where))  # a field of no phase: told all the same
        raise
    if file_problem is not None:
        raise file_problem
    return options


def model_input(model: type[OptionSection], section: Any, env: Mapping[str, str]) -> Any:
    """A model's input: the YAML section's keys as written (one spelt like an environment variable is
    a misspelt key, not the variable), and the environment variables the model reads that are set
    (a blank one counts as unset), which win over the keys they stand for."""
    if section and not isinstance(section, Mapping):
        return section  # the model says "expected a mapping"
    names = model.env_names()
    given = {(_Key(k) if k in names else k): v for k, v in dict(section or {}).items()}
    given.update({name: env[name] for name in names if env.get(name, "").strip()})
    return given


def where_in(model: type[OptionSection], prefix: str) -> Callable[[Loc], str]:
    """An error location named as the user knows it: an environment variable as it is, a key with
    its section's path (`vultr.emulator.pools[0].plan`)."""

    def where(loc: Loc) -> str:
        if loc and not isinstance(loc[0], _Key) and str(loc[0]) in model.env_names():
            return dotted("", loc)
        return dotted(prefix, loc)

    return where


def first_problem(exc: ValidationError, where: Callable[[Loc], str]) -> ConfigError:
    """The problem a user is told about first, as when options were checked one after another."""
    return problems(exc, where)[0]


def told_in_order(
    exc: ValidationError, where: Callable[[Loc], str], model: type[OptionSection], first: Sequence[str] = ()
) -> list[tuple[ConfigError, str | None]]:
    """`exc`'s problems (with the field each is of) in the order a user is told them: an unknown key,
    then the fields named in `first`, then the others as declared, the client tuning last."""

    def rank(pair: tuple[ConfigError, str | None]) -> tuple[int, int]:
        name = pair[1]
        if name is None:
            return (0, 0)
        if name in first:
            return (1, first.index(name))
        return (3, 0) if name in _TUNING_FIELDS else (2, 0)

    fields = [model.field_of(tuple(err["loc"])) for err in exc.errors()]
    return sorted(zip(problems(exc, where), fields, strict=True), key=rank)


class _Key(str):
    """A name that is a YAML key, never an input read in a key's place, even when spelt like one (a
    key spelt like an environment variable is an unknown key, named as one)."""


class OptionSection(BaseModel):
    """A mapping of options: unknown keys refused (a typo never falls back to a default), values
    frozen, inputs never quoted in pydantic's messages (a secret could be one).

    How an unknown key is told is the model's choice: called an `UNKNOWN` ("option", "key"), with
    the nearest known key suggested (`SUGGEST`) or all of them listed, and named as the user wrote
    it (`AS_WRITTEN`) or as `spell` spells it. `NULL_IS_EMPTY`: a null section takes its defaults."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=norm_key,
        populate_by_name=True,
        hide_input_in_errors=True,
        arbitrary_types_allowed=True,
    )

    UNKNOWN: ClassVar[str] = "option"
    SUGGEST: ClassVar[bool] = False
    AS_WRITTEN: ClassVar[bool] = False
    NULL_IS_EMPTY: ClassVar[bool] = False

    @classmethod
    def spell(cls, key: object) -> str:
        """A key as the model's aliases spell it (a model with other aliases spells them its way)."""
        return norm_key(key)

    @classmethod
    def keys(cls) -> frozenset[str]:
        """The keys users write (the aliases in `spell` form; environment variables excluded)."""
        return frozenset(name for name in _aliases(cls) if name == cls.spell(name) and " " not in name)

    @classmethod
    def env_names(cls) -> frozenset[str]:
        """The inputs read in place of a key: environment variables, and values a loader read from an
        in-tree file (named as its errors name them: `cloud-config token`)."""
        return frozenset(name for name in _aliases(cls) if name != cls.spell(name) or " " in name)

    @classmethod
    def field_of(cls, loc: Loc) -> str | None:
        """The field an error location's first part (a key, a variable or the field's name) is of."""
        if not loc:
            return None
        for name in cls.model_fields:
            if loc[0] == name or loc[0] in _aliases(cls, name):
                return name
        return None

    @classmethod
    def unknown(cls, key: str) -> str:
        """The problem an unknown key is reported with."""
        if cls.SUGGEST:
            return unknown_key("", key, cls.keys(), what=cls.UNKNOWN).problem
        return f"unknown {cls.UNKNOWN} (known: {', '.join(sorted(cls.keys()))})"

    @model_validator(mode="before")
    @classmethod
    def _spelling(cls, data: Any) -> Any:
        if isinstance(data, BaseModel):
            return data
        if data is None and cls.NULL_IS_EMPTY:
            return {}
        if not isinstance(data, Mapping):
            raise Problem("expected a mapping")
        env, known = cls.env_names(), cls.keys()
        given = {}
        unknown: list[tuple[Any, str]] = []
        for raw, value in data.items():
            key = raw if raw in env and not isinstance(raw, _Key) else cls.spell(raw)
            if key not in env and key not in known:
                unknown.append((raw, key))
            given[key] = value
        if unknown:
            # one line names every unknown key of the section, not only the first: a first run
            # must not be a loop of fixing one typo and being told about the next
            (raw, key), rest = unknown[0], unknown[1:]
            others = "".join(
                f"; {(r if cls.AS_WRITTEN else k)!r}: unknown {cls.UNKNOWN}{did_you_mean(k, known)}"
                for r, k in rest
            )
            raise Problem(cls.unknown(key) + others, at=(_Key(raw if cls.AS_WRITTEN else key),))
        for name in cls.model_fields:  # a field given twice: its first spelling with a value wins
            present = [alias for alias in _aliases(cls, name) if alias in given]
            winner = next((alias for alias in present if given[alias]), present[0] if present else None)
            for shadowed in present:
                if shadowed != winner:
                    del given[shadowed]
        return given


def _aliases(model: type[BaseModel], only: str | None = None) -> list[str]:
    """Every spelling of the model's fields (of field `only`, if given)."""
    names: list[str] = []
    for name, info in model.model_fields.items():
        if only is not None and name != only:
            continue
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.extend(str(choice) for choice in alias.choices)
        elif isinstance(alias, str):
            names.append(alias)
        else:
            names.append(info.alias or name)
    return names


def _at_least_0(v: Any) -> float:
    return float(checked(read_float, v))


def _above_0(v: Any) -> float:
    return float(checked(read_float, v, allow_zero=False))


def _count(v: Any, minimum: int = 0) -> int:
    return int(checked(read_int, v, minimum=minimum))


def _counts(v: Any) -> dict[str, int]:
    """Each count's problem names its key (`stock.vc2-1c-2gb`)."""
    out = {}
    for key, value in checked(read_mapping, v or {}).items():
        try:
            out[str(key)] = read_int(value, "")
        except ConfigError as exc:
            raise Problem(exc.problem, at=(str(key),)) from None
    return out


def non_empty_list(what: str, *, null: bool = False) -> BeforeValidator:
    """A list of at least one item (`null`: or null, meaning "none given")."""

    def check(value: Any) -> Any:
        if (value is not None or not null) and (not isinstance(value, list) or not value):
            raise Problem(f"expected a non-empty list of {what}")
        return value

    return BeforeValidator(check)


#: seconds of an emulator's timer: a number of at least 0
Seconds = Annotated[float, BeforeValidator(_at_least_0)]
#: a timeout: a number above 0
Timeout = Annotated[float, BeforeValidator(_above_0)]
#: an emulator's requests per second: above 0; left out, 0 or empty: no limit
EmulatorRate = Annotated[float | None, BeforeValidator(lambda v: _above_0(v) if v else None)]
#: whole numbers of at least 0, of at least 1, of at least 0 or null
Count = Annotated[int, BeforeValidator(_count)]
PositiveCount = Annotated[int, BeforeValidator(lambda v: _count(v, 1))]
OptionalCount = Annotated[int | None, BeforeValidator(lambda v: None if v is None else _count(v))]
#: name -> a whole number of at least 0 (an emulator's stock per plan or type)
Counts = Annotated[dict[str, int], BeforeValidator(_counts)]
#: a string; null is ""
Text = Annotated[str, BeforeValidator(lambda v: "" if v is None else str(v))]
#: `reserved`: resource name -> Kubernetes quantity taken from each node's allocatable
Reserved = Annotated[dict[str, str], BeforeValidator(lambda v: dict(checked(read_reserved, v)))]
#: a sub-section left out or empty (`emulator:` with nothing under it) takes its defaults
OR_DEFAULTS = BeforeValidator(lambda v: v or {})


class TuningOptions(OptionSection):
    """The HTTP client keys every cloud section takes (providers/options.py `ClientTuning`); a key
    left out keeps the cloud's default, a key given as null is refused (but `rate-limit: null`,
    which lifts the limit)."""

    connect_timeout: Annotated[float | None, BeforeValidator(_above_0)] = None
    read_timeout: Annotated[float | None, BeforeValidator(_above_0)] = None
    retries: Annotated[int | None, BeforeValidator(lambda v: int(checked(read_int, v)))] = None
    retry_budget: Annotated[float | None, BeforeValidator(_above_0)] = None
    rate_limit: Annotated[float | None, BeforeValidator(lambda v: None if v is None else _above_0(v))] = None
    catalog_ttl: Annotated[float | None, BeforeValidator(_at_least_0)] = None

    def tuning(self, defaults: ClientTuning) -> ClientTuning:
        """`defaults` with the keys given here."""
        given = {name: getattr(self, name) for name in self.model_fields_set if name in _TUNING_FIELDS}
        return dataclasses.replace(defaults, **given)


_TUNING_FIELDS = frozenset(TuningOptions.model_fields)
