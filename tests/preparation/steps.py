"""Every tool, binary, package and image the suite needs, as one preparation step each.

A step names the tests that use it (paths under the repository, a folder standing for all it
holds) and the markers those tests carry, so that a narrowed run (`pytest tests/test_cli.py`,
`-m "not slow"`) prepares only what it will use. `make` builds or fetches through the same
support code the tests later call to find the result (which then only looks it up: see gate.py);
`cached` says, without building, whether the result is already there. `needs` orders steps whose
result another's build reuses (the host's Go build cache, the bases an image is built on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.preparation import makers


@dataclass(frozen=True)
class Step:
    name: str
    version: Callable[[], str]
    cached: Callable[[], bool]
    make: Callable[[], None]
    users: tuple[str, ...]
    #: the markers every test using it carries: `-m` expressions are evaluated against these
    markers: frozenset[str] = frozenset({"integration"})
    needs: tuple[str, ...] = ()
    #: what the machine must have for the step to run at all ("go", "apt", "root"): without it the
    #: step is unavailable, and its tests skip outside CI
    requires: frozenset[str] = frozenset({"go"})


_SLOW = frozenset({"integration", "slow"})
_DEPLOY = ("tests/deploy", "tests/deploy_support", "tests/test_docs_chart.py", "tests/observability")
_CLUSTER = (
    "tests/ha",
    "tests/observability",
    "tests/providers",
    "tests/simulator",
    "tests/realnode",
    "tests/test_controlplane.py",
)
_IMAGE = ("tests/realnode/test_image.py", "tests/realnode/test_chart.py")

_GO, _APT, _ROOT = frozenset({"go"}), frozenset({"apt"}), frozenset({"root", "apt"})

STEPS: tuple[Step, ...] = (
    # The longest chains first: the runner starts steps in this order once their needs are met.
    Step("control-plane", *makers.CONTROL_PLANE, users=_CLUSTER, requires=_GO | _APT),
    Step("host-packages", *makers.HOST_PACKAGES, users=("tests/realnode",), requires=_ROOT),
    Step(
        "python-base",
        *makers.PYTHON_BASE,
        users=_IMAGE,
        markers=_SLOW,
        needs=("host-packages",),
        requires=_ROOT,
    ),
    Step("front", *makers.FRONT, users=("tests",)),
    Step(
        "go-base", *makers.GO_BASE, users=_IMAGE, markers=_SLOW, needs=("python-base",), requires=_ROOT | _GO
    ),
    Step("image", *makers.IMAGE, users=_IMAGE, markers=_SLOW, needs=("go-base", "front"), requires=_ROOT),
    # after kube-apiserver: the two share most of Kubernetes' packages in Go's build cache
    Step(
        "k8s-node",
        *makers.K8S_NODE,
        users=("tests/realnode/test_chart.py",),
        markers=_SLOW,
        needs=("control-plane",),
    ),
    Step(
        "conformance",
        *makers.CONFORMANCE,
        users=("tests/test_conformance.py", "tests/test_ca_loop.py", "tests/realnode"),
        needs=("front",),
    ),
    Step("standin", *makers.STANDIN, users=("tests/realnode",), needs=("conformance",)),
    Step(
        "standin-image",
        *makers.STANDIN_IMAGE,
        users=("tests/realnode/test_chart.py",),
        markers=_SLOW,
        needs=("standin", "host-packages"),
        requires=_ROOT | _GO,
    ),
    Step(
        "pause",
        *makers.PAUSE,
        users=("tests/realnode/test_chart.py",),
        markers=_SLOW,
        needs=("host-packages",),
        requires=_ROOT | _GO,
    ),
    # from kube-apiserver's module, after it: they reuse most of its compiled packages
    Step("helm", *makers.HELM, users=(*_DEPLOY, "tests/realnode", "tests/ha"), needs=("control-plane",)),
    Step("kustomize", *makers.KUSTOMIZE, users=(*_DEPLOY, "tests/providers"), needs=("control-plane",)),
    Step("actionlint", *makers.ACTIONLINT, users=("tests/test_release.py",)),
    Step("crds", *makers.CRDS, users=_DEPLOY),
    Step("promtool", *makers.PROMTOOL, users=("tests/observability",), requires=_APT),
    Step("chromium", *makers.CHROMIUM, users=("tests/simulator",), requires=_APT),
)

BY_NAME = {step.name: step for step in STEPS}
