"""One error vocabulary for everything a client can see.

Each ``ServiceError`` subclass is named by its AWS error code; ``api/protocol.py`` turns it into
``{"__type": code, "message": ...}`` with ``http_status``. Infrastructure errors live in
``providers.base`` and never reach HTTP directly.
"""

from __future__ import annotations

from typing import ClassVar


class ServiceError(Exception):
    """An error returned to the API client."""

    code: ClassVar[str] = "InternalFailure"
    http_status: ClassVar[int] = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationException(ServiceError):
    code = "ValidationException"


class ResourceNotFound(ServiceError):
    code = "ResourceNotFound"


class ResourceInUse(ServiceError):
    code = "ResourceInUse"


class ResourceLimitExceeded(ServiceError):
    code = "ResourceLimitExceeded"


class ConflictException(ServiceError):
    code = "ConflictException"


class UnknownOperationException(ServiceError):
    code = "UnknownOperationException"


class NotImplementedOperation(ServiceError):
    """A SageMaker operation slurmpod knows but does not implement (yet)."""

    code = "UnsupportedOperation"


class SerializationException(ServiceError):
    code = "SerializationException"


class UnrecognizedClientException(ServiceError):
    code = "UnrecognizedClientException"
    http_status = 403


class MissingAuthenticationToken(ServiceError):
    code = "MissingAuthenticationTokenException"
    http_status = 403


class InvalidSignatureException(ServiceError):
    code = "InvalidSignatureException"
    http_status = 403


class AccessDeniedException(ServiceError):
    code = "AccessDeniedException"
    http_status = 403


class InternalFailure(ServiceError):
    code = "InternalFailure"
    http_status = 500


def validation_message(findings: list[str]) -> str:
    """Joins validation findings the way AWS does: ``N validation error(s) detected: a; b``."""
    n = len(findings)
    noun = "error" if n == 1 else "errors"
    return f"{n} validation {noun} detected: " + "; ".join(findings)


class VersionConflict(Exception):
    """A store write lost an optimistic-concurrency race; the caller re-reads and retries."""


class LeaseLost(Exception):
    """A reconciler write of a cluster this server no longer owns (its lease expired or another server took it):
    nothing was written. Not a ``VersionConflict``: retrying cannot succeed; the new owner carries on."""


class ClientTokenTaken(Exception):
    """A write claimed a ClientToken another request holds (the whole write is rolled back)."""
