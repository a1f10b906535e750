"""The `group_options` section read and applied: what a group ends up with, and how a bad value is
told (the end-to-end path over a real port is tests/grpcapi/test_group_options.py)."""

from __future__ import annotations

import math

import pytest

from cloudprovider_grpc.core.errors import ConfigError
from cloudprovider_grpc.providers.driver import GroupConfig
from cloudprovider_grpc.providers.group_options import GroupOptions

pytestmark = pytest.mark.unit


def test_values_are_read_in_the_words_of_cas_flags() -> None:
    read = GroupOptions.read(
        {
            "bare-metal": {
                "max_node_startup_time": "1m30s",
                "Scale-Down-Unneeded-Time": 300,
                "scale_down_utilization_threshold": 0.25,
                "zero_or_max_node_scaling": True,
            }
        }
    )
    assert read.by_ref == {
        "bare-metal": {
            "max_node_startup_time": 90.0,
            "scale_down_unneeded_time": 300.0,
            "scale_down_utilization_threshold": 0.25,
            "zero_or_max_node_scaling": True,
        }
    }
    assert not GroupOptions.read(None) and not GroupOptions.read({})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"max_node_startup_time": -1}, "must be between 0 and 9223372036 seconds, got -1"),
        ({"max_node_startup_time": 1e12}, "must be between 0 and 9223372036 seconds"),
        ({"max_node_startup_time": True}, "True is not a number"),
        ({"scale_down_utilization_threshold": math.nan}, "must be between 0 and 1, got nan"),
        ({"scale_down_gpu_utilization_threshold": "half"}, "'half' is not a number between 0 and 1"),
        ({"ignore_daemonsets_utilization": 1}, "1 is not true or false"),
    ],
)
def test_a_bad_value_names_its_key(value: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        GroupOptions.read({"g": value})
    assert caught.value.key == f"group_options.g.{next(iter(value))}"
    assert problem in caught.value.problem


def test_an_option_given_twice_in_two_spellings_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        GroupOptions.read({"g": {"max_node_startup_time": 60, "max-node-startup-time": 90}})
    assert caught.value.key == "group_options.g.max-node-startup-time"
    assert caught.value.problem == "max_node_startup_time is given twice"


def test_a_section_that_is_no_mapping_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected a mapping of node group id or name"):
        GroupOptions.read(["g"])
    with pytest.raises(ConfigError, match="must not be empty"):
        GroupOptions.read({" ": {}})


def test_the_id_wins_over_the_name_and_both_over_the_backends_own() -> None:
    options = GroupOptions.read(
        {
            "workers": {"max_node_startup_time": 600, "scale_down_unneeded_time": 60},
            "7e2e-uuid": {"max_node_startup_time": 1200},
        }
    )
    own = GroupConfig("7e2e-uuid", 1, 4, name="workers", options={"scale_down_unready_time": 30.0})
    assert options.applied(own).options == {
        "scale_down_unready_time": 30.0,
        "scale_down_unneeded_time": 60.0,
        "max_node_startup_time": 1200.0,
    }
    other = GroupConfig("other", 0, 3, options={"scale_down_unready_time": 30.0})
    assert options.applied(other) is other
    assert options.unmatched([own, other]) == []
    assert options.unmatched([other]) == ["7e2e-uuid", "workers"]
