"""The shared option-model machinery: spellings, environment aliases, the user's words and keys."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import AliasChoices, Field, ValidationError, field_validator

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.option_models import (
    Count,
    Counts,
    EmulatorRate,
    OptionSection,
    PositiveCount,
    Problem,
    Text,
    TuningOptions,
    dotted,
    model_input,
    non_empty_list,
    problems,
    raise_by_phase,
    told_in_order,
    where_in,
)
from cloudprovider_grpc.providers.options import ClientTuning

pytestmark = pytest.mark.unit


class Inner(OptionSection):
    rate_limit: EmulatorRate = None


class Section(TuningOptions):
    org_id: int = Field(0, validation_alias=AliasChoices("ORG_ID", "org-id"))
    inner: list[Inner] = Field(default_factory=list)

    @field_validator("org_id", mode="before")
    @classmethod
    def _org(cls, v: Any) -> int:
        if not str(v).isdigit():
            raise Problem(f"{v!r} is not a positive integer")
        return int(v)


def where(loc: tuple[str | int, ...]) -> str:
    return str(loc[0]) if loc and loc[0] in Section.env_names() else dotted("sec", loc)


def told(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as err:
        Section.model_validate(data)
    return [(p.key, p.problem) for p, _ in told_in_order(err.value, where, Section)]


def test_keys_are_accepted_in_any_spelling_and_the_environment_wins() -> None:
    section = Section.model_validate({"Org_ID": "4", "READ_TIMEOUT": 2})
    assert (section.org_id, section.read_timeout) == (4, 2.0)
    assert Section.model_validate({"org-id": "4", "ORG_ID": "9"}).org_id == 9
    assert Section.keys() >= {"org-id", "read-timeout", "inner"} and Section.env_names() == {"ORG_ID"}


def test_problems_name_the_variable_or_the_key_path_in_the_users_words() -> None:
    assert told({"ORG_ID": "x"}) == [("ORG_ID", "'x' is not a positive integer")]
    assert told({"org-id": "x"}) == [("sec.org-id", "'x' is not a positive integer")]
    assert told({"inner": [{}, {"rate-limit": -1}]}) == [
        ("sec.inner[1].rate-limit", "must be above 0, got -1")
    ]
    ((key, problem),) = told({"org-idd": 1})
    assert key == "sec.org-idd" and problem.startswith("unknown option (known: ")


def test_the_client_tuning_is_told_last_and_keeps_the_clouds_defaults() -> None:
    assert [key for key, _ in told({"retries": -1, "org-id": "x"})] == ["sec.org-id", "sec.retries"]
    defaults = ClientTuning(rate_limit=4.0, retries=2)
    assert Section.model_validate({}).tuning(defaults) == defaults
    lifted = Section.model_validate({"rate-limit": None, "retries": "5"}).tuning(defaults)
    assert (lifted.rate_limit, lifted.retries, lifted.read_timeout) == (None, 5, defaults.read_timeout)
    with pytest.raises(ValidationError) as err:
        Section.model_validate({"read-timeout": None})
    assert [str(p) for p in problems(err.value, where)] == [
        str(ConfigError("sec.read-timeout", "None is not a number"))
    ]


class Pools(OptionSection):
    """Words of the other clouds: keys as written, the nearest key suggested, null for defaults."""

    UNKNOWN = "key"
    SUGGEST = True
    AS_WRITTEN = True
    NULL_IS_EMPTY = True

    size: PositiveCount = 1
    spare: Count = 0
    stock: Counts = Field(default_factory=dict)
    name: Text = ""
    items: Annotated[list[int], non_empty_list("items", null=True)] | None = None


class Inputs(OptionSection):
    token: str = Field("", validation_alias=AliasChoices("TOKEN", "token", "cloud-config token"), repr=False)
    zone: str = Field("", validation_alias=AliasChoices("ZONE", "zone"))
    region: str = Field("", validation_alias=AliasChoices("AREA", "region"))
    pools: Pools = Field(default_factory=Pools)


def all_told(model: type[OptionSection], data: Any) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as err:
        model.model_validate(data)
    return [(p.key, p.problem) for p in problems(err.value, where_in(model, "sec"))]


def test_counts_texts_and_lists_are_read_in_the_shared_words() -> None:
    assert Pools.model_validate(None) == Pools()
    pools = Pools.model_validate({"size": "3", "stock": {"a": 2}, "name": None})
    assert (pools.size, pools.stock, pools.name) == (3, {"a": 2}, "")
    assert all_told(Pools, {"size": 0, "spare": -1, "stock": {"a": "x"}, "items": []}) == [
        ("sec.size", "must be at least 1, got 0"),
        ("sec.spare", "must be at least 0, got -1"),
        ("sec.stock.a", "'x' is not an integer"),
        ("sec.items", "expected a non-empty list of items"),
    ]


def test_an_unknown_key_is_told_in_the_models_words() -> None:
    assert all_told(Pools, {"Sizes": 1}) == [("sec.Sizes", "unknown key; did you mean 'size'?")]
    ((key, problem),) = all_told(Inputs, {"pools": {}, "zones": 1})
    assert key == "sec.zones" and problem.startswith("unknown option (known: pools, region, token, zone")


def test_the_environment_wins_a_blank_one_is_unset_and_an_empty_key_hides_nothing() -> None:
    given = model_input(Inputs, {"zone": "a", "token": ""}, {"ZONE": "b", "TOKEN": "  "})
    assert Inputs.model_validate(given).zone == "b"
    filed = {**given, "cloud-config token": "from-file"}
    assert Inputs.model_validate(filed).token == "from-file"
    assert "from-file" not in repr(Inputs.model_validate(filed))


def test_a_key_spelt_like_a_variable_is_an_unknown_key() -> None:
    given = model_input(Inputs, {"AREA": "a"}, {"AREA": "b"})
    ((key, problem),) = all_told(Inputs, given)
    assert key == "sec.area" and problem.startswith("unknown option")
    assert Inputs.model_validate(model_input(Inputs, {"ZONE": "a"}, {})).zone == "a"  # the key, any case


def test_problems_are_told_phase_by_phase_each_phase_at_once() -> None:
    with pytest.raises(ValidationError) as err:
        Pools.model_validate({"size": 0, "spare": -1, "name": "n", "stock": {"a": -1}})
    phases = [{"stock"}, {"size", "spare"}]
    with pytest.raises(ConfigError) as told_first:
        raise_by_phase(err.value, where_in(Pools, "sec"), Pools, phases)
    assert (told_first.value.key, told_first.value.problem) == ("sec.stock.a", "must be at least 0, got -1")
    with pytest.raises(ConfigError) as told_next:
        raise_by_phase(err.value, where_in(Pools, "sec"), Pools, phases[1:])
    assert str(told_next.value).count("must be at least") == 2
    raise_by_phase(err.value, where_in(Pools, "sec"), Pools, [{"name"}])  # no problem in that phase
