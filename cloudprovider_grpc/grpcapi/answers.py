"""The servicer's answers kept between calls, each reused while what it was built from is unchanged.

Why: CA asks NodeGroups once a loop, NodeGroupTemplateNodeInfo per group, and NodeGroupForNode and
NodeGroupTargetSize per node, several times a loop; building and encoding those answers afresh was
most of the server's own per-call work. None of them can go stale: each is keyed by the object the
provider returned (the shared machinery returns the same NodeGroup, group list and template objects
while they are unchanged) or by the value it is a pure function of (see prebuilt.Memo).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from cloudprovider_grpc.core.errors import NotImplementedByProvider
from cloudprovider_grpc.grpcapi.outcome import safe_message
from cloudprovider_grpc.grpcapi.prebuilt import Memo, Prebuilt
from cloudprovider_grpc.grpcapi.wire import group_pb
from cloudprovider_grpc.k8s.node import encode_template_node
from cloudprovider_grpc.k8s.template import NodeTemplate
from cloudprovider_grpc.observability.logs import OncePer
from cloudprovider_grpc.protos import externalgrpc_pb2 as pb
from cloudprovider_grpc.providers.contract import NodeGroup

# the servicer's logger: the warning is about its RPC, and operators filter on its name
log = logging.getLogger(__name__)

#: an empty NodeGroup (id "") tells CA the node belongs to no group (upstream fix #7334)
_NO_GROUP = Prebuilt.of(pb.NodeGroupForNodeResponse(nodeGroup=pb.NodeGroup()))


def _target_answer(size: int) -> Prebuilt:
    return Prebuilt.of(pb.NodeGroupTargetSizeResponse(targetSize=size))


class Answers:
    """The answers of one servicer, by what each is a function of."""

    def __init__(self) -> None:
        self._templates: dict[str, tuple[NodeTemplate, bytes]] = {}
        self._templates_lock = threading.Lock()
        self._groups_answer: tuple[object, pb.NodeGroupsResponse] = (None, pb.NodeGroupsResponse())
        # CA asks NodeGroupForNode for every node several times a loop: answers are reused per group
        # object (providers return the same NodeGroup object while the group is unchanged)
        self._for_node_answers: dict[str, tuple[NodeGroup, Prebuilt]] = {}
        # the per-node RPCs' answers by value (see Prebuilt), each a pure function of its key
        self._target_answers: Memo[int, Prebuilt] = Memo(4096)
        self._invalid_templates = OncePer(60.0)

    def node_groups(self, groups: Sequence[NodeGroup]) -> pb.NodeGroupsResponse:
        key, answer = self._groups_answer
        if key is not groups:
            answer = pb.NodeGroupsResponse(nodeGroups=[group_pb(g) for g in groups])
            self._groups_answer = (groups, answer)
        return answer

    def for_node(self, group: NodeGroup | None) -> Prebuilt:
        if group is None:
            return _NO_GROUP
        cached = self._for_node_answers.get(group.id)
        if cached is None or cached[0] is not group:
            cached = (group, Prebuilt.of(pb.NodeGroupForNodeResponse(nodeGroup=group_pb(group))))
            self._for_node_answers[group.id] = cached
        return cached[1]

    def target_size(self, size: int) -> Prebuilt:
        return self._target_answers.get(size, _target_answer)

    def template_node(self, group_id: str, template: NodeTemplate) -> bytes:
        """The encoded template node, reused while the provider's template is unchanged.

        The rule: the cached bytes are reused when the provider returns the same template object
        (the shared machinery caches each group's template until the catalogue reloads) or an equal
        one (a backend that builds a new object per call); anything else is encoded afresh."""
        cached = self._templates.get(group_id)
        if cached is not None and (cached[0] is template or cached[0] == template):
            return cached[1]
        try:
            raw = encode_template_node(template, group_id)
        except ValueError as exc:
            # UNIMPLEMENTED, not INTERNAL: from 1.29.0 CA's client maps it to "not implemented" and
            # the template processor skips the group (cluster-autoscaler-1.29.0
            # cloudprovider/externalgrpc/externalgrpc_node_group.go:213-216,
            # processors/nodeinfosprovider/mixed_nodeinfos_processor.go:155-158), where any other
            # error abandons the whole loop on 1.29.0-1.31.3, 1.32.0-1.32.2 and 1.33.0 (later
            # releases skip the group on any error, kubernetes/autoscaler#8418); before 1.29 every
            # error abandons it (cluster-autoscaler-1.28.7 core/static_autoscaler.go:352-356)
            message = f"template for node group {group_id!r} is invalid: {exc}"
            suppressed = self._invalid_templates.due()
            if suppressed is not None:
                log.warning(
                    "NodeGroupTemplateNodeInfo: %s; answered UNIMPLEMENTED (%d more since the last "
                    "warning; at most one warning per %.0fs)",
                    safe_message(message),
                    suppressed,
                    self._invalid_templates.interval,
                )
            raise NotImplementedByProvider(message) from None
        with self._templates_lock:
            self._templates[group_id] = (template, raw)
        return raw
