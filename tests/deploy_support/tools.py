"""The real deployment tools, run by the tests: kustomize and helm, built from the Go module proxy.

Both are pinned in tests/support/gotools.py and built once into the shared cache outside the clone,
by the preparation phase before the first test (tests/preparation/): here they are only looked up.
Without Go (or without the proxy) a test that needs them is skipped with the reason, except in CI
(CI=true), where that is a failure: CI must never pass without having run the real tools.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from tests.support.gotools import go_install, go_module_dir, in_ci
from tests.support.kubebuilds import HELM, KUSTOMIZE, KubeTool

Objects = list[dict[str, Any]]
#: The cluster version `helm template` renders for (helm's own default is v1.20): the oldest the
#: project supports with native sidecars GA. The output is validated against 1.33 to 1.37.
KUBE_VERSION = "v1.33.0"


def unavailable(what: str, reason: str) -> NoReturn:
    """Fail in CI, skip elsewhere: the one rule for every missing external tool."""
    message = f"{what} unavailable: {reason}"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


@functools.cache
def _built(spec: tuple[str, str, str] | KubeTool) -> Path | str:
    try:
        if isinstance(spec, KubeTool):
            return spec.build()
        return go_install(*spec)
    except RuntimeError as exc:  # Go missing or the build failed: reported by the caller
        return str(exc).strip().splitlines()[0] if str(exc).strip() else "build failed"


def tool(spec: tuple[str, str, str] | KubeTool) -> Path:
    """The binary of a pinned Go tool: a `(package, version, binary)` installed with `go install`,
    or one of the Kubernetes module's tools (built by the preparation phase; skip, or fail in CI,
    when it could not be had)."""
    built = _built(spec)
    if isinstance(built, str):
        name, version = (spec.binary, spec.version) if isinstance(spec, KubeTool) else (spec[2], spec[1])
        unavailable(f"{name} {version}", built)
    assert isinstance(built, Path)
    return built


@functools.cache
def _module(module: str, version: str) -> Path | str:
    try:
        return go_module_dir(module, version, step="crds")
    except RuntimeError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else "download failed"


def module_dir(module: str, version: str) -> Path:
    """A Go module's files (test data published in it), downloaded once into the shared cache."""
    found = _module(module, version)
    if isinstance(found, str):
        unavailable(f"{module}@{version}", found)
    assert isinstance(found, Path)
    return found


def run(args: Sequence[str | Path], *, cwd: Path | None = None, timeout: float = 120) -> str:
    """Run a tool; its stdout, or an AssertionError carrying its stderr."""
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def parse_stream(text: str) -> Objects:
    """Every non-empty document of a YAML stream, as the tools print them."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def kustomize_build(directory: Path) -> Objects:
    """`kustomize build DIR`: exactly what `kubectl apply -k DIR` would send."""
    return parse_stream(run([tool(KUSTOMIZE), "build", directory]))


def helm_template(
    chart: Path,
    *,
    release: str,
    namespace: str,
    values: Sequence[Path] = (),
    set_values: Sequence[str] = (),
    kube_version: str = KUBE_VERSION,
) -> Objects:
    """`helm template`: the objects `helm install` would create (nothing is contacted)."""
    args: list[str | Path] = [tool(HELM), "template", release, chart, "--namespace", namespace]
    for path in values:
        args += ["--values", path]
    for item in set_values:
        args += ["--set", item]
    args += ["--kube-version", kube_version]
    return parse_stream(run(args))


def helm_template_error(chart: Path, *, values: Sequence[Path] = (), set_values: Sequence[str] = ()) -> str:
    """The error `helm template` prints for values it refuses (AssertionError if it renders)."""
    args: list[str] = [str(tool(HELM)), "template", "x", str(chart), "--kube-version", KUBE_VERSION]
    for path in values:
        args += ["--values", str(path)]
    for item in set_values:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0, f"helm rendered values it should refuse: {set_values}"
    return proc.stderr
