"""The realnode tier's shared fixtures: the image (built once per session, cached across sessions
in podman's storage) and the one-node cluster every chart test shares.

The cluster is one per session (per xdist worker, like the control plane), and only the chart's
one test asks for it, so a suite run starts one cluster whatever its workers; the lock keeps two
runs on one machine apart (the node's bridge and address are the machine's)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cloudprovider_grpc.front.gotoolchain import file_lock
from tests.deploy_support.tools import unavailable
from tests.realnode import cluster as clusters
from tests.realnode import figures
from tests.realnode import image as images
from tests.realnode.host import cache, require_tools
from tests.support import controlplane, kubebuilds


@pytest.fixture(scope="session")
def built() -> images.Built:
    """The repository's image, tagged `localhost/cloudprovider-grpc:realnode` (built by the
    preparation phase); its size and layers printed (`-s` shows them)."""
    require_tools()
    podman = images.Podman.create()
    image = images.prepared(podman, images.SUITE_TAG)
    size, layers = images.size_and_layers(podman, image)
    figures.note(f"\nimage {image}: {size / 1e6:.1f} MB, {len(layers)} layers")
    for layer_size, created_by in layers:
        print(f"  {layer_size / 1e6:8.1f} MB  {created_by[:110]}")
    return images.Built(podman, image)


@pytest.fixture(scope="module")
def node(built: images.Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    """The one-node cluster, Ready, with the image loaded into containerd (also as `:realnode-2`,
    the upgrade's new tag). Its timings are printed. Per module: one module uses it, and the
    cluster (its control plane, kubelet, containerd and pods) is drained and stopped right after,
    not left running beside the rest of the suite until the worker ends."""
    try:
        controlplane.binaries()
        kubebuilds.build_node_components()
    except (controlplane.Unavailable, RuntimeError) as exc:
        unavailable("the realnode cluster's binaries", str(exc))
    workdir = tmp_path_factory.mktemp("realnode")
    with file_lock(cache() / "locks", "cluster"), clusters.cluster(workdir, built.podman) as running:
        started = time.monotonic()
        running.load_image(built.podman, built.image, f"{images.REPOSITORY}:realnode-2")
        running.timings["image load"] = time.monotonic() - started
        figures.note("\nrealnode cluster: " + ", ".join(f"{k} {v:.1f} s" for k, v in running.timings.items()))
        yield running
