"""AWS JSON 1.1 framing: target parsing, body decoding, error and result encoding."""

from __future__ import annotations

import json
from typing import Any

from slurmpod.errors import SerializationException, ServiceError, UnknownOperationException

CONTENT_TYPE = "application/x-amz-json-1.1"
ACCEPTED_CONTENT_TYPES = ("application/x-amz-json-1.1", "application/x-amz-json-1.0", "application/json")
MAX_BODY_BYTES = 1024 * 1024


class RequestTooLarge(ServiceError):
    code = "RequestEntityTooLargeException"
    http_status = 413


def parse_target(target: str | None) -> str:
    """``SageMaker.CreateCluster`` -> ``CreateCluster``."""
    if not target:
        raise UnknownOperationException("Missing X-Amz-Target header; expected SageMaker.<Operation>.")
    service, _, op = target.partition(".")
    if service != "SageMaker" or not op:
        raise UnknownOperationException(f"Unknown operation {target}.")
    return op


SSM_PREFIX = "AmazonSSM"
CLOUDTRAIL_PREFIX = "com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101"


def parse_service_target(target: str | None) -> tuple[str, str]:
    """``SageMaker.CreateCluster`` -> (``sagemaker``, ``CreateCluster``); CloudTrail's
    ``com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101.LookupEvents`` -> (``cloudtrail``, ``LookupEvents``);
    ``AmazonSSM.StartSession`` -> (``ssm``, ``StartSession``)."""
    if target:
        prefix, _, op = target.rpartition(".")
        if prefix == CLOUDTRAIL_PREFIX and op:
            return "cloudtrail", op
        if prefix == SSM_PREFIX and op:
            return "ssm", op
    return "sagemaker", parse_target(target)


def guess_target(target: str | None) -> tuple[str, str]:
    """``parse_service_target`` that never raises (``"-"`` for no operation): names a refused call in the audit
    trail before the target is checked."""
    try:
        return parse_service_target(target)
    except UnknownOperationException:
        return "sagemaker", "-"


def check_content_type(value: str | None) -> None:
    base = (value or "").split(";", 1)[0].strip().lower()
    if base not in ACCEPTED_CONTENT_TYPES:
        raise SerializationException(
            f"Unsupported Content-Type '{value or ''}'; send {CONTENT_TYPE}."
        )


def decode_body(body: bytes) -> Any:
    if len(body) > MAX_BODY_BYTES:
        raise RequestTooLarge(f"Request body of {len(body)} bytes exceeds the limit of {MAX_BODY_BYTES} bytes.")
    if not body.strip():
        raise SerializationException("Request body is empty; expected a JSON object.")
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise SerializationException("Request body is nested too deeply.") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise SerializationException(f"Request body is not valid JSON: {exc}") from exc


MAX_MESSAGE_CHARS = 8192


def encode_error(err: ServiceError) -> tuple[int, bytes]:
    message = err.message
    if len(message) > MAX_MESSAGE_CHARS:  # huge inputs must not come back as huge errors
        message = message[: MAX_MESSAGE_CHARS - 20] + " ... (truncated)"
    return err.http_status, json.dumps({"__type": err.code, "message": message}).encode()


def encode_result(result: dict[str, Any]) -> bytes:
    return json.dumps(result, separators=(",", ":")).encode()
