"""The shared option-model machinery: spellings, environment aliases, the user's words and keys."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import AliasChoices, Field, ValidationError, field_validator

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.option_models import (
    EmulatorRate,
    OptionSection,
    Problem,
    TuningOptions,
    dotted,
    problems,
    told_in_order,
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
