"""What the layouts are rendered from: helm and kustomize pinned and built outside the clone, the
official cluster-autoscaler chart as kubernetes/autoscaler's snapshot, a values file for it for
every cloud registered in the build, and our values files holding only keys that chart knows (it has
no values schema to catch a misspelt one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudprovider_grpc.providers.registry import BACKENDS as REGISTERED_BACKENDS
from tests.deploy_support.layouts import (
    OFFICIAL_CHART,
    OFFICIAL_VALUES,
    ROOT,
    STANDALONE_VALUES,
    official_values_files,
)
from tests.deploy_support.rendered import CHART_BACKENDS
from tests.deploy_support.tools import run, tool
from tests.support.kubebuilds import HELM, KUSTOMIZE

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_go_tools_are_pinned_and_cached_outside_the_clone() -> None:
    """The deployment tests use exactly the pinned helm and kustomize, built outside the clone."""
    helm, kustomize = tool(HELM), tool(KUSTOMIZE)
    for binary in (helm, kustomize):
        assert not binary.resolve().is_relative_to(ROOT), binary
    assert run([helm, "version", "--template", "{{.Version}}"]).strip() == HELM.version.rsplit(".", 1)[0]
    assert run([kustomize, "version"]).strip() == KUSTOMIZE.version


def test_official_chart_is_the_upstream_snapshot() -> None:
    """Tests render kubernetes/autoscaler's own chart from ../shared, never a copy in the project."""
    chart = yaml.safe_load((OFFICIAL_CHART / "Chart.yaml").read_text())
    assert (chart["name"], chart["version"]) == ("cluster-autoscaler", "9.59.0")
    assert not list(ROOT.glob("**/charts/cluster-autoscaler/Chart.yaml"))
    for values in official_values_paths():
        assert f"chart {chart['version']}" in values.read_text(), f"{values.name} names another chart version"


def test_every_registered_backend_has_official_chart_values() -> None:
    """A cloud that exists in the registry is installable with the official chart."""
    assert set(REGISTERED_BACKENDS) <= set(official_values_files()), sorted(
        set(REGISTERED_BACKENDS) - set(official_values_files())
    )
    assert set(REGISTERED_BACKENDS) <= set(CHART_BACKENDS)


def official_values_paths() -> list[Path]:
    return [*official_values_files().values(), OFFICIAL_VALUES / f"{STANDALONE_VALUES}.yaml"]


def unknown_keys(ours: dict[str, Any], defaults: dict[str, Any], where: str = "") -> list[str]:
    """Keys of our values the chart does not have. Maps the chart leaves free (empty by default,
    such as podAnnotations, and extraArgs, CA's flags, checked against CA's source elsewhere) are
    not descended into."""
    found = []
    for key, value in ours.items():
        if key not in defaults:
            found.append(where + key)
        elif (
            isinstance(value, dict)
            and isinstance(defaults[key], dict)
            and defaults[key]
            and key != "extraArgs"
        ):
            found += unknown_keys(value, defaults[key], f"{where}{key}.")
    return found


@pytest.mark.parametrize("values", official_values_paths(), ids=lambda p: p.stem)
def test_official_chart_knows_every_value_we_set(values: Path) -> None:
    """The official chart has no values schema and ignores a misspelt key: check ours against its
    values.yaml, then let `helm lint --strict` render it with ours."""
    defaults = yaml.safe_load((OFFICIAL_CHART / "values.yaml").read_text())
    assert not unknown_keys(yaml.safe_load(values.read_text()), defaults)
    out = run([tool(HELM), "lint", "--strict", OFFICIAL_CHART, "--values", values])
    assert "0 chart(s) failed" in out, out
