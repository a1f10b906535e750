"""Node groups with no template source: no template from the cloud's catalogue and no machine of
their own for cluster-autoscaler to copy.

Why they are worth a warning: CA cannot scale such a group up from zero (from 1.29.0 it skips a
group whose template is "not implemented": cluster-autoscaler-1.29.0
processors/nodeinfosprovider/mixed_nodeinfos_processor.go:155-158), and CA 1.25-1.28 abandon the
whole loop on the template error, before cluster state is updated, so no group scales up or down
while one such group has no node (cluster-autoscaler-1.28.7 core/static_autoscaler.go:352-356).
`check-config` fails on them; `serve` names them after the first Refresh and then at most once a
minute.
"""

from __future__ import annotations

import logging

from cloudprovider_grpc.core.errors import NotImplementedByProvider
from cloudprovider_grpc.observability.logs import OncePer
from cloudprovider_grpc.providers.contract import CloudProvider

log = logging.getLogger(__name__)

#: what gives such a group a template, said the same way by `serve` and `check-config`
REMEDY = (
    "give the group an instance type or plan the cloud's catalogue knows, or keep one machine in it "
    "(min size 1)"
)


def templateless(provider: CloudProvider) -> list[str]:
    """The ids of the groups with no template and no machine, from the provider's memory."""
    out = []
    for group in provider.node_groups():
        try:
            provider.template(group.id)
            continue
        except NotImplementedByProvider:
            pass
        except Exception:  # a backend fault is the template RPC's to report, never Refresh's
            continue
        if not provider.nodes(group.id):
            out.append(group.id)
    return out


class TemplatelessWarning:
    """The warning `serve` logs after a Refresh while some group has no template source: the first
    time, then at most once per `interval`."""

    def __init__(self, interval: float = 60.0) -> None:
        self._once = OncePer(interval)

    def check(self, provider: CloudProvider) -> None:
        groups = templateless(provider)
        if not groups or self._once.due() is None:
            return
        shown = ", ".join(repr(g) for g in groups[:20])
        if len(groups) > 20:
            shown += f" and {len(groups) - 20} more"
        log.warning(
            "node groups %s have no template and no machine to copy one from: cluster-autoscaler cannot "
            "scale them up from zero, and cluster-autoscaler 1.25 to 1.28 scale no group while one of "
            "them has no node; %s (at most one warning per %.0fs)",
            shown,
            REMEDY,
            self._once.interval,
        )
