"""An Exoscale API v2 emulator served over real HTTP, shipped with the product.

Faithful to what the API documents and its clients rely on (the
OpenAPI document python-exoscale ships, which the test suite validates every answer against):
- paths under `/v2/`, `:scale`/`:evict` verbs in the last path segment, any Host;
- EXO2-HMAC-SHA256 verification over the raw path, the raw body bytes as received, the signed
  query values in the pragma's order and the expiry; an unknown key, a bad or expired signature
  or an unsigned query parameter are refused with a configurable 401/403;
- per-key IAM operation lists (403 for operations outside them) and deny rules on resources
  (`denied_resources`: 403 for requests naming a denied nodepool or Instance Pool);
- errors as `{"message": "..."}`; every success is 200 + JSON, mutating calls answer an operation;
- operations `pending` -> `success` after `operation_polls` polls and `operation_seconds`, or the
  injected `failure`/`timeout` with a `reason`, or held pending for a while (`hold_operations`);
- the state machines on an injectable clock: scale-up adds `starting` members that turn `running`
  after `boot_seconds`, scale-down removes arbitrary members, evict exactly the named ones; removed
  members stay `destroying` for `destroy_seconds`; pools are `scaling-up`/`scaling-down` meanwhile
  and SKS nodepools mirror their pool (`scaling`);
- the `instance` quota (limit -1 = unlimited), a scale-up beyond it either refused (400) or failing
  its operation (`quota_mode`); scaling a busy pool either accepted or failed as `conflict`;
- capacity per instance type in the zone (`stock`): a scale-up beyond what is left fails its
  operation with reason `unavailable` (an OpenAPI `operation.reason`), so one pool the zone cannot
  fill fails while the others scale; destroyed members give their capacity back;
- seeded faults, slow answers and 429s from the shared base, inspectable state, a state file.
Undocumented details (the exact auth-failure status, quota, capacity and conflict behaviour,
messages) are our reconstruction and configurable where no source settles them. That capacity
runs out per instance type and zone is Exoscale's own word: "Dedicated Inference may be
capacity-constrained on certain offerings", per GPU family and zone (community.exoscale.com,
product/concrete-ai/dedicated-inference/service-boundaries/limits-and-quotas).
"""

from __future__ import annotations

from cloudprovider_grpc.emulators.exoscale.api import ExoscaleApi
from cloudprovider_grpc.emulators.exoscale.core import OPERATION_REASONS, Observer
from cloudprovider_grpc.emulators.exoscale.gateway import POOL_OPERATIONS, SKS_OPERATIONS

__all__ = ["OPERATION_REASONS", "POOL_OPERATIONS", "SKS_OPERATIONS", "ExoscaleEmulator", "Observer"]


class ExoscaleEmulator(ExoscaleApi):
    """The whole emulator: the core (core.py), its gateway (gateway.py) and the API (api.py)."""

    name = "exoscale"
    prefix = "/v2/"
