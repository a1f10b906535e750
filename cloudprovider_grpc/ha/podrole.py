"""A leader-elected replica's role, written on its own pod: what a Service selects and what a
Deployment deletes last.

With two replicas behind one Service, only the leader may receive cluster-autoscaler's calls, yet
both pods must be Ready: a rolling update (maxSurge 1, maxUnavailable 0) removes an old pod only
while enough pods are available (k8s.io/kubernetes pkg/controller/deployment/rolling.go), so a
standby that is never Ready stalls every rollout. So readiness means "serves, as leader or warm
standby", and the leader is told apart by a label on its pod that the Service selects:

- `cloudprovider-grpc.io/leader: "true"` on the leader's pod, `"false"` on a standby's; a process
  writes "false" before it reports ready (a container restarted in the former leader's pod must
  not keep the label), and "true" after its takeover, before it answers as the leader.
- `controller.kubernetes.io/pod-deletion-cost` high on the leader, low on a standby: a Deployment
  scaling an old ReplicaSet down deletes the standby first, so a rollout hands the leadership over
  once (k8s.io/kubernetes pkg/controller/replicaset: pods with a lower cost are deleted first).

The pod is named by the downward API (POD_NAME, POD_NAMESPACE); without both, nothing is labelled.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from cloudprovider_grpc.ha.lease import api_problem

log = logging.getLogger(__name__)

LEADER_LABEL = "cloudprovider-grpc.io/leader"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: the leader's deletion cost; a standby's is 0 (the default of a pod without the annotation)
LEADER_COST = "1000"


class PodRole:
    """Writes this replica's role onto its own pod (a merge patch of one label and one annotation)."""

    def __init__(self, core_api: Any, namespace: str, pod: str) -> None:
        self._api = core_api
        self.namespace = namespace
        self.pod = pod
        self._problem: str | None = None

    def mark(self, leader: bool) -> bool:
        """Label the pod leader or standby; False (one log line per distinct problem) when the API
        refused or could not be reached, so the caller retries."""
        body = {
            "metadata": {
                "labels": {LEADER_LABEL: "true" if leader else "false"},
                "annotations": {DELETION_COST: LEADER_COST if leader else "0"},
            }
        }
        try:
            self._api.patch_namespaced_pod(self.pod, self.namespace, body)
        except Exception as exc:
            problem = api_problem(exc)
            if problem != self._problem:
                log.warning(
                    "leader election: labelling pod %s/%s as %s: %s",
                    self.namespace,
                    self.pod,
                    "leader" if leader else "standby",
                    problem,
                )
            self._problem = problem
            return False
        self._problem = None
        log.info(
            "leader election: pod %s/%s labelled %s=%s",
            self.namespace,
            self.pod,
            LEADER_LABEL,
            "true" if leader else "false",
        )
        return True


def build_pod_role(kubeconfig: Any) -> PodRole | None:
    """This process's pod, named by the downward API (POD_NAME and POD_NAMESPACE, both set as the
    chart and the manifests do), or None: a process outside a pod labels nothing."""
    pod = os.environ.get("POD_NAME", "").strip()
    namespace = os.environ.get("POD_NAMESPACE", "").strip()
    if not pod or not namespace:
        return None
    from kubernetes import client

    from cloudprovider_grpc.ha.lease import coordination_api

    return PodRole(client.CoreV1Api(coordination_api(kubeconfig).api_client), namespace, pod)


__all__ = ["DELETION_COST", "LEADER_LABEL", "PodRole", "build_pod_role"]
