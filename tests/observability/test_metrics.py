"""What `/metrics` shows a user: every family documented, no `*_created` noise, a build_info series,
and size gauges named for what they count. Scraped over HTTP from a real server."""

from __future__ import annotations

import platform
import re
import urllib.request
from pathlib import Path

import grpc
import pytest

from cloudprovider_grpc import __version__
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from tests.support.servers import channel, sim_server, stub

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OPERATING = (ROOT / "docs" / "operating.md").read_text()


def scrape() -> str:
    with sim_server() as handle:
        s = stub(channel(handle))
        s.NodeGroups(pb.NodeGroupsRequest(), timeout=5)
        s.NodeGroupIncreaseSize(pb.NodeGroupIncreaseSizeRequest(id="general", delta=1), timeout=5)
        with pytest.raises(grpc.RpcError):
            s.NodeGroupTargetSize(pb.NodeGroupTargetSizeRequest(id="missing"), timeout=5)
        s.Refresh(pb.RefreshRequest(), timeout=5)
        url = f"http://127.0.0.1:{handle.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()


@pytest.fixture(scope="module")
def exposition() -> str:
    return scrape()


def base(name: str) -> str:
    """A family's name without the suffix the exposition format adds (`_total`, `_info`)."""
    return re.sub(r"_(total|info)$", "", name)


def families(text: str) -> set[str]:
    return {base(m.group(1)) for m in re.finditer(r"^# TYPE (cloudprovider_grpc_\w+) ", text, re.M)}


def documented() -> set[str]:
    return {base(name) for name in re.findall(r"`(cloudprovider_grpc_\w+)`", OPERATING)}


def test_no_created_series(exposition: str) -> None:
    created = [line for line in exposition.splitlines() if re.match(r"\w+_created[{ ]", line)]
    assert not created, created[:5]


def test_build_info_names_the_version(exposition: str) -> None:
    m = re.search(r"^cloudprovider_grpc_build_info\{(.*)\} 1\.0$", exposition, re.M)
    assert m, "no cloudprovider_grpc_build_info series"
    assert f'version="{__version__}"' in m.group(1)
    assert f'python="{platform.python_version()}"' in m.group(1)


def test_every_family_is_documented(exposition: str) -> None:
    found = families(exposition)
    assert {"cloudprovider_grpc_rpc_requests", "cloudprovider_grpc_node_group_target_size"} <= found
    assert found <= documented(), sorted(found - documented())


def test_every_family_the_code_defines_is_documented() -> None:
    source = (ROOT / "cloudprovider_grpc" / "observability" / "metrics.py").read_text()
    defined = {base(name) for name in re.findall(r'"(cloudprovider_grpc_\w+)"', source)}
    assert defined
    assert defined <= documented(), sorted(defined - documented())


def test_size_gauges_say_what_they_count(exposition: str) -> None:
    assert "registered_size" not in exposition  # the cloud's machines, not Kubernetes' registered nodes
    # the sim creates the new machine at once (inline workers): booting machines count
    assert 'cloudprovider_grpc_node_group_machines{backend="sim",group="general"} 2.0' in exposition
    assert 'cloudprovider_grpc_node_group_target_size{backend="sim",group="general"} 2.0' in exposition
