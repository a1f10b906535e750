"""Release artifacts: one version for package, image and chart; the sdist and wheel a release
publishes install into a fresh virtualenv and serve; the release workflow passes actionlint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from cloudprovider_grpc import __version__
from tests.support.ports import free_port
from tests.support.waits import poll

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "ghcr.io/cloudprovider-grpc/cloudprovider-grpc"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if (ROOT / f).is_file()]


def test_the_version_lives_in_one_place() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cloudprovider_grpc.__version__"}
    chart = yaml.safe_load((ROOT / "deploy/helm/cloudprovider-grpc/Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    values = yaml.safe_load((ROOT / "deploy/helm/cloudprovider-grpc/values.yaml").read_text())
    assert values["image"]["repository"] == IMAGE and not values["image"]["tag"]
    assert re.search(rf"^ARG VERSION={re.escape(__version__)}$", (ROOT / "Dockerfile").read_text(), re.M)
    newest = re.search(
        r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(), re.M
    )
    assert newest and newest.group(1) == __version__, "CHANGELOG.md's newest release is not this version"


def test_every_image_reference_names_the_released_image_at_this_version() -> None:
    """Manifests, values files and docs: `<...>cloudprovider-grpc:<tag>` is always this version, and
    the default registry is the one the release workflow pushes to."""
    wrong = []
    for name in tracked_files():
        if not name.startswith(("deploy/", "manifests/", "docs/", "README.md")):
            continue
        text = (ROOT / name).read_text(errors="replace")
        for m in re.finditer(r"([\w./-]*cloudprovider-grpc):(\d+\.\d+\.\d+)\b", text):
            if m.group(2) != __version__:
                wrong.append(f"{name}: {m.group(0)}")
        for m in re.finditer(r"^\s*(?:- )?image:\s*(\S*cloudprovider-grpc\S*)$", text, re.M):
            if not m.group(1).startswith(f"{IMAGE}:"):
                wrong.append(f"{name}: {m.group(1)}")
    assert not wrong, wrong


def test_every_layout_deploys_the_package_version() -> None:
    """kustomize's `images:` override (newTag) and the chart's default tag are the package's version,
    so no layout runs an image older (or newer) than the code beside it."""
    tags = {}
    for kfile in sorted((ROOT / "manifests").rglob("kustomization.yaml")):
        for image in yaml.safe_load(kfile.read_text()).get("images") or []:
            if image["name"].endswith("cloudprovider-grpc"):
                tags[str(kfile.relative_to(ROOT))] = str(image.get("newTag"))
    assert tags, "no kustomization pins our image"
    assert set(tags.values()) == {__version__}, tags
    chart = yaml.safe_load((ROOT / "deploy/helm/cloudprovider-grpc/Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


def git_tree_copy(dest: Path) -> Path:
    """The tracked files only, as a release checkout has them (no venv, caches or build output)."""
    for name in tracked_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
        target.chmod((ROOT / name).stat().st_mode)
    return dest


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_serves(tmp_path: Path) -> None:
    source = git_tree_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    # `python -m build` as the release workflow runs it: the sdist, then the wheel built from it.
    # No isolation: this venv's setuptools builds it, so no build environment is downloaded.
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (sdist,) = dist.glob(f"cloudprovider_grpc-{__version__}.tar.gz")
    (wheel,) = dist.glob(f"cloudprovider_grpc-{__version__}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(f"cloudprovider_grpc-{__version__}.dist-info/METADATA").decode()
    assert any(n.endswith("licenses/LICENSE") for n in names), "the wheel carries no LICENSE"
    assert any(n.startswith("cloudprovider_grpc/front/") and n.endswith(".go") for n in names)
    assert "License-Expression: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata
    assert sdist.stat().st_size > 0

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDPROVIDER_GRPC_", "VIRTUAL_ENV"))}
    install = subprocess.run(
        [str(venv / "bin/pip"), "install", "--disable-pip-version-check", "--no-compile", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    version = subprocess.run(
        [str(venv / "bin/cloudprovider-grpc"), "version"], capture_output=True, text=True, timeout=60, env=env
    )
    assert version.stdout.startswith(f"cloudprovider-grpc {__version__} "), version.stdout + version.stderr

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(venv / "bin/cloudprovider-grpc"), "serve",
             "--address", f"127.0.0.1:{port}", "--metrics-address", ""],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
    try:
        poll(lambda: "serving externalgrpc" in log.read_text(), 60, "the serving line")
        grpcurl = Path(sys.executable).parent / "grpcurl"
        call = subprocess.run(
            [str(grpcurl), "-plaintext", f"127.0.0.1:{port}",
             "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroups"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert call.returncode == 0, call.stderr
        assert [g["id"] for g in json.loads(call.stdout)["nodeGroups"]] == ["general", "highmem", "gpu"]
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0, log.read_text()
    assert "build-front" not in log.read_text()


@pytest.mark.slow  # actionlint is built from the Go module proxy on first use
def test_release_workflow_passes_actionlint() -> None:
    from tests.deploy_support.tools import run, tool
    from tests.support.gotools import ACTIONLINT

    run([tool(ACTIONLINT), "-no-color", WORKFLOW], cwd=ROOT)


def test_release_workflow_publishes_the_three_artifacts() -> None:
    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow[True]["push"]["tags"] == ["v*.*.*"]  # YAML reads the key `on` as True
    jobs = flow["jobs"]
    steps = [step for job in jobs.values() for step in job.get("steps", [])]
    uses = {step["uses"].partition("@")[0]: step for step in steps if "uses" in step}
    build = uses["docker/build-push-action"]["with"]
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"} and build["push"]
    assert jobs["image"]["env"]["IMAGE"] == "ghcr.io/${{ needs.version.outputs.owner }}/cloudprovider-grpc"
    assert "pypa/gh-action-pypi-publish" in uses
    scripts = "\n".join(step.get("run", "") for step in steps)
    assert 'helm push "chart/cloudprovider-grpc-${VERSION}.tgz" "oci://ghcr.io/${OWNER}/charts"' in scripts
    assert "python -m build" in scripts
