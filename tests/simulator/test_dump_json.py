"""A dump parsed with its equal leaf objects shared (dump_json.py): the same JSON as json.loads
gives, equal leaves one object, and no two leaves merged that differ in a value's type or in
their keys' order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudprovider_grpc.simulator.dump_json import loads_shared
from cloudprovider_grpc.simulator.snapshot import load_dump

pytestmark = pytest.mark.unit


def _pod(i: int, flag: object = True) -> dict[str, object]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": f"web-{i}",
            "labels": {"app": "web", "pod-template-hash": "abc12"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-abc12", "controller": flag}],
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]},
        "status": {"phase": "Running"},
    }


def test_the_tree_is_the_one_json_loads_gives_with_equal_leaves_shared() -> None:
    text = json.dumps({"kind": "List", "items": [_pod(0), _pod(1)]})
    data = loads_shared(text)
    assert data == json.loads(text)
    a, b = data["items"]
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["ownerReferences"][0] is b["metadata"]["ownerReferences"][0]
    assert a["status"] is b["status"]
    reqs = [p["spec"]["containers"][0]["resources"]["requests"] for p in (a, b)]
    assert reqs[0] is reqs[1]
    assert a["metadata"] is not b["metadata"]  # the names differ


def test_leaves_equal_in_python_but_not_in_json_stay_apart() -> None:
    # True == 1 == 1.0 in Python; JSON tells them apart, and so must the shared tree
    items = loads_shared(
        json.dumps([{"v": True}, {"v": 1}, {"v": 1.0}, {"a": "x", "b": "y"}, {"b": "y", "a": "x"}])
    )
    assert [type(i.get("v")) for i in items[:3]] == [bool, int, float]
    assert list(items[3]) == ["a", "b"]
    assert list(items[4]) == ["b", "a"]
    assert items[3] is not items[4]


def test_a_dump_file_loads_through_it(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": [_pod(0), _pod(1, flag=False)]}))
    a, b = load_dump(path)
    assert a["metadata"]["labels"] is b["metadata"]["labels"]
    assert a["metadata"]["ownerReferences"][0]["controller"] is True
    assert b["metadata"]["ownerReferences"][0]["controller"] is False
