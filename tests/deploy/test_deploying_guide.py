"""The deployment guide (docs/deploying.md) holds to the tested layouts: the paths it applies
exist, the images it names are the pinned ones, and each `helm install`/`helm upgrade` it tells a
reader to run installs exactly a layout these tests render and check."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.deploy_support.layouts import (
    CA_RELEASE,
    CHART_EXAMPLE_SETTINGS,
    NAMESPACE,
    OFFICIAL_CHART,
    OFFICIAL_VALUES,
    OUR_RELEASE,
    ROOT,
    STANDALONE_VALUES,
    our_chart_variants,
)
from tests.deploy_support.pods import container, find, flag_value
from tests.deploy_support.rendered import (
    CA_CONTAINER,
    CA_DEPLOYMENT,
    LAYOUTS,
    deploying_section,
    project_version,
    rendered,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_readme_deploying_commands_name_real_paths() -> None:
    section = deploying_section()
    local = [p.rstrip(".") for p in re.findall(r"kubectl apply (?:-k|-f) ([\w./-]+)", section)]
    assert {"manifests/sidecar", "manifests/standalone"} <= set(local)
    for path in local:
        assert (ROOT / path).exists(), path
    build = re.search(r"docker build -t (\S+) \.", section)
    assert build and build.group(1).endswith(f"cloudprovider-grpc:{project_version()}")
    ca_image = container(find(rendered("sidecar"), "Deployment", CA_DEPLOYMENT), CA_CONTAINER)["image"]
    assert ca_image in section, "the deployment guide names the pinned cluster-autoscaler image"


def readme_helm_commands() -> list[list[str]]:
    """Every `helm install`/`helm upgrade` the deployment guide tells a reader to run."""
    section = deploying_section().replace("\\\n", " ")
    return [
        shlex.split(line.strip())
        for line in section.splitlines()
        if re.match(r"\s*helm (install|upgrade) ", line)
    ]


def test_readme_helm_commands_are_the_tested_ones() -> None:
    """Each Helm command of the deployment guide installs exactly a layout the tests render and check: the
    official chart at the tested version with one of our values files, or our chart with the settings
    the standalone layouts use; release names and namespace as in the tests."""
    commands = readme_helm_commands()
    assert commands, "docs/deploying.md has no helm install command"
    chart_version = yaml.safe_load((OFFICIAL_CHART / "Chart.yaml").read_text())["version"]
    values_seen, providers_seen = set(), set()
    for argv in commands:
        verb_index = argv.index("install") if "install" in argv else argv.index("upgrade")
        release, chart = argv[verb_index + 1 : verb_index + 3]
        assert flag_value(argv, "--namespace") == NAMESPACE, argv
        values = [argv[i + 1] for i, a in enumerate(argv) if a in ("--values", "-f")]
        settings = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        if chart == "autoscaler/cluster-autoscaler":
            assert release == CA_RELEASE and flag_value(argv, "--version") == chart_version, argv
            assert len(values) == 1 and not settings, argv
            path = ROOT / values[0]
            assert path.parent == OFFICIAL_VALUES and path.is_file(), argv
            assert path.stem == STANDALONE_VALUES or f"helm-{path.stem}" in LAYOUTS, argv
            values_seen.add(path.stem)
        else:
            assert chart == "deploy/helm/cloudprovider-grpc" and release == OUR_RELEASE, argv
            if values:  # one of the chart's variants, rendered as it is
                assert len(values) == 1 and not settings, argv
                variant = {ROOT / v: k for k, v in our_chart_variants().items()}.get(ROOT / values[0])
                assert variant and f"chart-{variant}" in LAYOUTS, argv
                continue
            provider = next((s.partition("=")[2] for s in settings if s.startswith("provider=")), "sim")
            rest = tuple(s for s in settings if not s.startswith("provider="))
            assert rest == CHART_EXAMPLE_SETTINGS.get(provider, ()), (rest, "differs from the tested layout")
            assert f"chart-{provider}" in LAYOUTS
            providers_seen.add(provider)
    assert {"sim", STANDALONE_VALUES} <= values_seen
    assert "sim" in providers_seen
