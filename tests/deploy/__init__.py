"""Deployment artefacts: the Dockerfile, the kustomize manifests and the Helm values and chart.

No Docker engine and no cluster are available here, so the tests check what can be checked without
them, with the real tools wherever one exists:
- the Dockerfile with hadolint, and its install step against the README's (same package spec),
  building the package from exactly the files the build context would hold (test_dockerfile.py);
- the pinned helm and kustomize, and the official chart's snapshot (test_sources.py);
- every layout (tests/deploy_support/layouts.py: each kustomization under manifests/, the official
  cluster-autoscaler chart with each of our values files, our own chart with each cloud) rendered by
  the real `kustomize build` and `helm template`, and every object validated against the Kubernetes
  1.33+ JSON schemas (kubernetes-validate, strict) or, for cert-manager and prometheus-operator
  kinds, against those projects' published CRDs (tests/deploy_support/crds.py) (test_validation.py);
- `helm lint --strict` on our chart, and its values.schema.json refusing bad values
  (test_our_chart.py);
- the wiring between objects (cloud-config address -> Service -> container port -> our --address,
  SANs, mounts, probes, NetworkPolicy selectors), and cluster-autoscaler's arguments checked against
  the flags it defines (tests/deploy_support/ca_flags.py) (test_wiring.py); the replicas and leader
  election of the standalone layouts (test_high_availability.py); each cloud reading the Secrets
  its in-tree provider used, unchanged (test_secrets.py);
- our container's arguments accepted by `cloudprovider-grpc check-config` with the files and
  environment the pod would have, and the server started that way and called as cluster-autoscaler
  calls it (test_server_runs.py);
- the deployment guide's commands held to the tested layouts (test_deploying_guide.py).

Every layout is rendered once per worker by tests/deploy_support/rendered.py.
"""
