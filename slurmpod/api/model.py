"""The botocore SageMaker model as the API contract (re-exports of ``slurmpod.api.contract``).

Validation walks an operation's input shape and collects every finding in AWS wording, e.g.
``Value 'ml.x' at 'instanceGroups.1.member.instanceType' failed to satisfy constraint: Member must
satisfy enum value set: [...]``; :func:`raise_for_input` raises ``SerializationException`` or
``ValidationException`` as AWS's JSON front end does. :func:`conform_output` shapes a response.
"""

from __future__ import annotations

from slurmpod.api.contract.conform import OutputShapeError, conform_output
from slurmpod.api.contract.model import ServiceModel, get_model, operation_names
from slurmpod.api.contract.patterns import compile_pattern
from slurmpod.api.contract.render import RENDER_LIMIT, render_value
from slurmpod.api.contract.validate import (
    MAX_DEPTH,
    MAX_FINDINGS,
    Finding,
    FindingKind,
    check_input,
    format_validation_error,
    raise_for_input,
    validate_input,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_FINDINGS",
    "RENDER_LIMIT",
    "Finding",
    "FindingKind",
    "OutputShapeError",
    "ServiceModel",
    "check_input",
    "compile_pattern",
    "conform_output",
    "format_validation_error",
    "get_model",
    "operation_names",
    "raise_for_input",
    "render_value",
    "validate_input",
]
