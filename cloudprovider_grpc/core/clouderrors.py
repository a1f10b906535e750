"""Errors and error facts that come from a cloud, shared by the HTTP layer, the drivers and the
providers.

They live outside `providers/` so the HTTP layer (`http/`) depends on nothing above it. What CA sees
of a cloud failure is an `InstanceError` on an instance (externalgrpc InstanceErrorInfo); what our
code passes around is a `CloudError`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ErrorClass(enum.IntEnum):
    """cloudprovider.InstanceErrorClass (cluster-autoscaler cloudprovider/cloud_provider.go)."""

    OUT_OF_RESOURCES = 1  # stockout, quota: CA backs the group off and tries another
    OTHER = 99


@dataclass(frozen=True)
class InstanceError:
    """What CA sees in InstanceStatus.errorInfo."""

    code: str
    message: str
    error_class: ErrorClass = ErrorClass.OTHER


class CloudError(Exception):
    """A failed cloud call.

    `transient` is True when trying again later may succeed (connection errors, timeouts, 408, 429,
    5xx): for a create, the outcome is then unknown and the machine shape looks for the machine by
    its creation token before creating again. `error_class` classifies permanent failures for CA
    (OUT_OF_RESOURCES for stockouts and quota, OTHER otherwise). `code` is a short machine-readable
    reason shown to CA in InstanceErrorInfo.errorCode. The message must not contain secrets.
    """

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        error_class: ErrorClass = ErrorClass.OTHER,
        code: str = "",
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient
        self.error_class = error_class
        self.code = code or (
            "OUT_OF_RESOURCES" if error_class == ErrorClass.OUT_OF_RESOURCES else "CLOUD_ERROR"
        )
        self.status = status

    def as_instance_error(self) -> InstanceError:
        return InstanceError(code=self.code, message=self.message, error_class=self.error_class)


class MachineGone(CloudError):
    """The machine does not exist (any more); deleting it is then already done."""

    def __init__(self, message: str = "machine not found") -> None:
        super().__init__(message, code="NOT_FOUND", status=404)
