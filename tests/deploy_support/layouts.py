"""Every way the project installs cluster-autoscaler with our server, rendered by the real tools.

A layout is one set of objects a user applies:
- each kustomization under manifests/ (`kustomize build`), the layouts and every per-cloud overlay
  found on disk (`manifests/providers/<cloud>/`, and `<cloud>/standalone/`);
- the official cluster-autoscaler chart (../shared/upstream/charts/cluster-autoscaler, the snapshot
  of kubernetes/autoscaler's chart) with each of our values files, `deploy/helm/cluster-autoscaler/`
  (`helm template`): the sidecar, one file per cloud;
- our chart, `deploy/helm/cloudprovider-grpc`, for each cloud (and each `ci/<cloud>-<variant>-values.yaml`),
  together with the official chart and `standalone.yaml`: the standalone layout as two Helm releases.

The list is built from the files on disk, so a new overlay or values file is rendered and checked
without touching the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.deploy_support.tools import Objects, helm_template, kustomize_build

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
HELM = ROOT / "deploy" / "helm"
OFFICIAL_VALUES = HELM / "cluster-autoscaler"
OUR_CHART = HELM / "cloudprovider-grpc"
OFFICIAL_CHART = ROOT.parent / "shared" / "upstream" / "charts" / "cluster-autoscaler"
NAMESPACE = "kube-system"
#: Release names the README's commands use.
CA_RELEASE = "cluster-autoscaler"
OUR_RELEASE = "cloudprovider-grpc"
KUSTOMIZATION_FILE = "kustomization.yaml"
#: deploy/helm/cluster-autoscaler/<this>.yaml is the CA side of the standalone layout, not a cloud.
STANDALONE_VALUES = "standalone"


@dataclass(frozen=True)
class Layout:
    """One installable set of objects: how it is rendered, its shape and its cloud."""

    name: str
    tool: str  # "kustomize" or "helm"
    shape: str  # "sidecar" (our server in CA's pod) or "standalone" (own Deployment, mTLS)
    backend: str
    render: Callable[[], Objects]
    #: the kustomization's directory (kustomize layouts)
    directory: Path | None = None
    #: a cloud's variant (Helm layouts: `<cloud>-<variant>.yaml`, e.g. alicloud-rrsa), whose example
    #: Secrets are those of the overlay `manifests/providers/<cloud>/<variant>/`
    variant: str = ""

    def example_secrets_file(self) -> Path:
        """The cloud's example Secrets for this layout: the nearest `secrets.example.yaml` from the
        kustomization up to `manifests/providers/<cloud>/` (a variant such as AliCloud's RRSA ships
        its own), or the cloud's for Helm layouts."""
        cloud_dir = MANIFESTS / "providers" / self.backend
        here = self.directory if self.directory is not None else cloud_dir / self.variant
        while here.is_relative_to(cloud_dir):
            if (here / "secrets.example.yaml").is_file():
                return here / "secrets.example.yaml"
            here = here.parent
        return cloud_dir / "secrets.example.yaml"

    def __str__(self) -> str:
        return self.name


def kustomize_layouts() -> list[Layout]:
    """Every kustomization that is a complete install (the RBAC component is rendered on its own)."""
    found = []
    for kfile in sorted(MANIFESTS.rglob(KUSTOMIZATION_FILE)):
        directory = kfile.parent
        rel = directory.relative_to(MANIFESTS)
        if rel.parts[0] == "providers":
            backend = rel.parts[1]
            shape = "standalone" if "standalone" in rel.parts[2:] else "sidecar"
            name = "-".join(rel.parts[1:])
        elif rel.parts[0] in ("sidecar", "standalone"):
            backend, shape, name = "sim", rel.parts[0], rel.parts[0]
        else:
            continue
        found.append(Layout(name, "kustomize", shape, backend, _kustomize(directory), directory))
    return found


def _kustomize(directory: Path) -> Callable[[], Objects]:
    return lambda: kustomize_build(directory)


def official_values_files() -> dict[str, Path]:
    """`<cloud>` or `<cloud>-<variant>` -> our values file for the official chart's sidecar layout."""
    return {p.stem: p for p in sorted(OFFICIAL_VALUES.glob("*.yaml")) if p.stem != STANDALONE_VALUES}


def render_official(values: Path) -> Objects:
    return helm_template(OFFICIAL_CHART, release=CA_RELEASE, namespace=NAMESPACE, values=[values])


def render_ours(*set_values: str, values: tuple[Path, ...] = ()) -> Objects:
    return helm_template(
        OUR_CHART, release=OUR_RELEASE, namespace=NAMESPACE, values=values, set_values=set_values
    )


def our_chart_variants() -> dict[str, Path]:
    """`<cloud>-<variant>` -> our chart's values for it (`ci/<cloud>-<variant>-values.yaml`, the
    files chart-testing also uses)."""
    return {p.name.removesuffix("-values.yaml"): p for p in sorted((OUR_CHART / "ci").glob("*-values.yaml"))}


def _official(values: Path) -> Callable[[], Objects]:
    return lambda: render_official(values)


def _standalone(settings: tuple[str, ...], values: tuple[Path, ...] = ()) -> Callable[[], Objects]:
    def render() -> Objects:
        ours = render_ours(*settings, values=values)
        return ours + render_official(OFFICIAL_VALUES / f"{STANDALONE_VALUES}.yaml")

    return render


#: Our chart's example settings per cloud (what the README tells a user to set), so the rendered
#: server has node groups to serve, like the per-cloud values files.
CHART_EXAMPLE_SETTINGS: dict[str, tuple[str, ...]] = {
    "cherry": ("clusterName=cluster1", "nodes={0:10:pool1,0:10:pool2}"),
    "exoscale": (
        "nodes={1:10:workers}",
        "extraEnv[0].name=EXOSCALE_SKS_CLUSTER",
        "extraEnv[0].value=my-cluster",
    ),
    "alicloud": ("nodes={1:10:asg-bp1example0000000001,0:4:asg-bp1examplegpu00000001}",),
}


def helm_layouts(backends: list[str]) -> list[Layout]:
    sidecars = [
        Layout(
            f"helm-{stem}",
            "helm",
            "sidecar",
            stem.partition("-")[0],
            _official(path),
            variant=stem.partition("-")[2],
        )
        for stem, path in official_values_files().items()
    ]
    standalone = [
        Layout(
            f"chart-{cloud}",
            "helm",
            "standalone",
            cloud,
            _standalone((f"provider={cloud}", *CHART_EXAMPLE_SETTINGS.get(cloud, ()))),
        )
        for cloud in backends
    ]
    variants = [
        Layout(
            f"chart-{stem}",
            "helm",
            "standalone",
            stem.partition("-")[0],
            _standalone((), (path,)),
            variant=stem.partition("-")[2],
        )
        for stem, path in our_chart_variants().items()
    ]
    return sidecars + standalone + variants
