# syntax=docker/dockerfile:1
#
# Container image for cloudprovider-grpc: the external gRPC cloud provider for cluster-autoscaler.
#
#   docker build -t ghcr.io/cloudprovider-grpc/cloudprovider-grpc:0.2.0 .
#
# Released images are built from this file by .github/workflows/release.yml for linux/amd64 and
# linux/arm64, with VERSION and REVISION passed as build arguments.
#
# Three stages: the first builds a virtualenv with the package installed exactly as the README's
# setup command does (`pip install .`); the second builds the compiled front with Go; the last copies
# only that virtualenv and the front's binary onto a clean base, so neither the source tree nor the
# build environments nor a pip or Go cache reaches the shipped image (the caches are BuildKit cache
# mounts, kept by the builder between builds).
#
# The runtime is friendly to `readOnlyRootFilesystem: true`: bytecode is compiled at build time
# and never written at run time, HOME and TMPDIR point at /tmp (mount an emptyDir there), and
# nothing else is written. There is no HEALTHCHECK on purpose: Kubernetes probes the metrics
# port's /healthz (see manifests/), and a Docker HEALTHCHECK would only run a second prober.

ARG PYTHON_IMAGE=python:3.11.17-slim-bookworm
# The compiled front (cloudprovider_grpc/front) is built with Go in its own stage; only the static
# binary reaches the image.
ARG GO_IMAGE=golang:1.26.8-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/venv

# Two installs of the same package spec, so that a source change does not download every dependency
# again. First the dependencies, in a layer that depends only on the build config, the LICENSE the
# wheel carries and the version's one place (cloudprovider_grpc/__init__.py): the package is installed
# from that file alone, with an empty long description. Then the package itself, from the whole
# source, without its dependencies (they are there), replacing the first one.
# Same package spec as the README's setup command 1; tests/deploy/test_dockerfile.py keeps the two in
# step. Dependencies are pinned to compatible ranges in pyproject.toml, which is the single place to
# change them; `pip install` compiles the installed modules to bytecode here, at build time. pip's
# cache is a build cache mount: no cache reaches a layer.
COPY pyproject.toml LICENSE ./
COPY cloudprovider_grpc/__init__.py ./cloudprovider_grpc/__init__.py
RUN --mount=type=cache,id=cloudprovider-grpc-pip,target=/root/.cache/pip \
    touch README.md \
    && /opt/venv/bin/pip install '.[otel]'

# Then what the package's own install needs: the README it declares as long description and the
# package (generated protobuf code and package data included).
COPY README.md ./
COPY cloudprovider_grpc ./cloudprovider_grpc
RUN --mount=type=cache,id=cloudprovider-grpc-pip,target=/root/.cache/pip \
    /opt/venv/bin/pip install --no-deps --force-reinstall '.[otel]' \
    && /opt/venv/bin/cloudprovider-grpc --help > /dev/null


# The compiled front: a static grpc-go binary built from the sources the package ships (the same ones
# `cloudprovider-grpc build-front` builds on a workstation). Go modules come from the module proxy.
FROM ${GO_IMAGE} AS front

WORKDIR /front
COPY cloudprovider_grpc/front/go.mod cloudprovider_grpc/front/go.sum cloudprovider_grpc/front/*.go ./
# Go's module and build caches are build cache mounts, like pip's above.
RUN --mount=type=cache,id=cloudprovider-grpc-gomod,target=/root/go/pkg/mod \
    --mount=type=cache,id=cloudprovider-grpc-gobuild,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOMODCACHE=/root/go/pkg/mod GOCACHE=/root/.cache/go-build \
    go build -trimpath -o /out/cpg-front . \
    && /out/cpg-front < /dev/null


FROM ${PYTHON_IMAGE}

ARG PYTHON_IMAGE
ARG VERSION=0.2.0
ARG REVISION=unknown

LABEL org.opencontainers.image.title="cloudprovider-grpc" \
      org.opencontainers.image.description="External gRPC cloud provider for Kubernetes cluster-autoscaler (--cloud-provider=externalgrpc)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

# A fixed numeric UID/GID so `runAsNonRoot: true` can be verified by the kubelet and matches the
# manifests' `runAsUser: 10001`.
RUN groupadd --system --gid 10001 cloudprovider \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin cloudprovider

COPY --from=build /opt/venv /opt/venv
COPY --from=front /out/cpg-front /opt/cloudprovider-grpc/cpg-front

# CLOUDPROVIDER_GRPC_FRONT_BINARY: `serve` (front: auto) runs the compiled front on the gRPC port.
ENV PATH=/opt/venv/bin:$PATH \
    CLOUDPROVIDER_GRPC_FRONT_BINARY=/opt/cloudprovider-grpc/cpg-front \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp

WORKDIR /tmp
USER 10001:10001

# 8086: gRPC (externalgrpc CloudProvider service); 8087: HTTP /metrics and /healthz.
EXPOSE 8086 8087

ENTRYPOINT ["cloudprovider-grpc"]
CMD ["serve"]
