"""How each preparation step is made, as (version, cached, make) for steps.py: thin calls into the
support code that owns each tool (tests/support/, tests/deploy_support/, tests/realnode/), which is
also what the tests call to find the result. `cached` looks without building; `make` builds or
fetches, and returns False when the build itself found everything cached (an image whose layers
all were), else None.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from cloudprovider_grpc.front import binary as front_binary
from tests.support import gotools

Maker = tuple[Callable[[], str], Callable[[], bool], Callable[[], bool | None]]


def _debian(package: str) -> bool:
    return (gotools.cache_root().parent / "debian" / package).is_dir()


def _go_tool(package: str, version: str, name: str) -> Maker:
    def make() -> None:
        gotools.go_install(package, version, name)

    return (lambda: version), (lambda: gotools.installed(version, name).exists()), make


def _kube_tool(name: str) -> Maker:
    """helm or kustomize, from kube-apiserver's Go module (`kubebuilds.KubeTool`)."""
    from tests.support import kubebuilds

    tool: kubebuilds.KubeTool = getattr(kubebuilds, name)

    def make() -> None:
        tool.build()

    return (lambda: tool.version), tool.built, make


def _front() -> Maker:
    def make() -> None:
        front_binary.build()

    return front_binary.source_key, lambda: front_binary.cached_binary().is_file(), make


def _conformance() -> Maker:
    from tests.support import conformance

    def make() -> None:
        conformance.client()

    def cached() -> bool:
        return (gotools.built_dir("conformance", conformance.client_key()) / "conformance").is_file()

    return conformance.client_key, cached, make


def _control_plane() -> Maker:
    from tests.support import controlplane, kubebuilds

    def cached() -> bool:
        return kubebuilds.k8s_built("kube-apiserver", kubebuilds.SOURCE) and _debian("etcd-server")

    def make() -> None:
        controlplane.binaries()

    return kubebuilds.kubernetes_version, cached, make


def _k8s_node() -> Maker:
    from tests.support import kubebuilds

    def make() -> None:
        kubebuilds.build_node_components()

    def cached() -> bool:
        return kubebuilds.k8s_built("k8s-node", kubebuilds.NODE_SOURCE)

    return kubebuilds.kubernetes_version, cached, make


def _crds() -> Maker:
    from tests.deploy_support import crds

    sources = list(crds.SOURCES.values())

    def cached() -> bool:
        return all(gotools.module_unpacked(s.module, s.version).is_dir() for s in sources)

    def make() -> None:
        for source in sources:
            gotools.go_module_dir(source.module, source.version, step="crds")

    return (lambda: ", ".join(f"{s.module.rsplit('/', 1)[-1]} {s.version}" for s in sources)), cached, make


def _promtool() -> Maker:
    from tests.support import kubebuilds

    def make() -> None:
        kubebuilds.debian_package("prometheus", "promtool")

    return (lambda: "Debian prometheus"), lambda: _debian("prometheus"), make


def _chromium() -> Maker:
    from tests.support import chromium

    def cached() -> bool:
        return any(shutil.which(n) for n in ("chromium", "chromium-browser")) or chromium.unpacked().exists()

    def make() -> None:
        if chromium.chromium() is None:
            raise RuntimeError("no headless Chromium: neither installed nor unpacked from Debian's packages")

    return (lambda: "Debian chromium"), cached, make


# ---------------------------------------------------------------- the real-node tier


def _host_packages() -> Maker:
    from tests.realnode import host

    def make() -> None:
        reason = host.install()
        if reason is not None:
            raise RuntimeError(reason)

    def version() -> str:
        return "Debian " + " ".join(sorted(set(host.PACKAGES.values())))

    return version, lambda: not host.missing_packages(), make


def _podman_image(name: Callable[[], str], build: Callable[[], object]) -> Maker:
    """A step whose result is a podman image: cached when the image is there (podman installed)."""
    from tests.realnode import image as images

    def cached() -> bool:
        return shutil.which("podman") is not None and images.Podman.create().exists(name())

    def make() -> None:
        build()

    return (lambda: name().rsplit(":", 1)[-1]), cached, make


def _python_base() -> Maker:
    from tests.realnode import image as images

    return _podman_image(images.python_base_name, lambda: images.python_base(images.Podman.create()))


def _go_base() -> Maker:
    from tests.realnode import image as images

    def build() -> None:
        podman = images.Podman.create()
        images.go_base(podman, images.python_base(podman))

    return _podman_image(images.go_base_name, build)


def _image() -> Maker:
    """The repository's image: always built (the tree may have changed since the last run), in
    seconds when every layer is cached; reported cached when the build left the image as it was."""
    from tests.realnode import image as images

    tag = f"{images.REPOSITORY}:{images.SUITE_TAG}"

    def image_id(podman: images.Podman) -> str:
        return podman.run("image", "inspect", "--format={{.Id}}", tag, check=False).stdout.strip()

    def make() -> bool | None:
        podman = images.Podman.create()
        before = image_id(podman)
        images.build(podman, images.SUITE_TAG)
        return False if before and before == image_id(podman) else None

    return images.go_version, lambda: False, make


def _pause() -> Maker:
    from tests.realnode import cluster
    from tests.realnode import image as images

    return _podman_image(cluster.pause_image_name, lambda: cluster.pause_image(images.Podman.create()))


def _standin() -> Maker:
    from tests.realnode import official_chart

    def make() -> None:
        official_chart.standin_binary()

    return official_chart.standin_key, official_chart.standin_built, make


def _standin_image() -> Maker:
    from tests.realnode import image as images
    from tests.realnode import official_chart

    return _podman_image(
        official_chart.standin_image_name, lambda: official_chart.standin_image(images.Podman.create())
    )


CONTROL_PLANE = _control_plane()
K8S_NODE = _k8s_node()
HOST_PACKAGES = _host_packages()
PYTHON_BASE = _python_base()
GO_BASE = _go_base()
IMAGE = _image()
FRONT = _front()
CONFORMANCE = _conformance()
STANDIN = _standin()
STANDIN_IMAGE = _standin_image()
PAUSE = _pause()
HELM = _kube_tool("HELM")
KUSTOMIZE = _kube_tool("KUSTOMIZE")
ACTIONLINT = _go_tool(*gotools.ACTIONLINT)
CRDS = _crds()
PROMTOOL = _promtool()
CHROMIUM = _chromium()
