"""Audit records of API calls and console actions, shaped like CloudTrail's (``eventVersion`` 1.09).

Request parameters are the call's own (camelCase, as CloudTrail writes them) after ``domain.audit.scrub``: members
named like a secret, and the model's sensitive members, read ``HIDDEN_DUE_TO_SECURITY_REASONS``; long strings and
lists are cut, and a record's parameters beyond ``MAX_PARAMETERS_BYTES`` are replaced by a note. A refused
signature is recorded without its parameters (nothing of an unauthenticated body is kept). No header but
User-Agent is kept, so no signature or key material reaches the trail.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurmpod.api.contract.model import get_model
from slurmpod.domain.audit import CONSOLE_SOURCE, SOURCE, AuditRecord, camel, is_read_only, scrub

EVENT_VERSION = "1.09"
CLUSTER_TYPE = "AWS::SageMaker::Cluster"
MAX_PARAMETERS_BYTES = 32 * 1024
SOURCES = {"sagemaker": SOURCE, "cloudtrail": "cloudtrail.amazonaws.com", "ssm": "ssm.amazonaws.com",
           "signin": CONSOLE_SOURCE}


@dataclass(frozen=True)
class Origin:
    """Where a call came from."""

    source_ip: str
    user_agent: str
    console: bool = False


@dataclass(frozen=True)
class Call:
    """One call as the audit trail sees it."""

    service: str  # sagemaker | cloudtrail | ssm | signin
    event_name: str
    account_id: str | None
    region: str
    access_key_id: str | None
    origin: Origin
    request_id: str
    params: object = None  # the decoded body (None: not kept)
    result: Mapping[str, Any] | None = None
    error_code: str | None = None
    error_message: str | None = None


@functools.cache
def sensitive_members() -> frozenset[str]:
    """Member names whose shape the SageMaker model marks sensitive."""
    model = get_model().botocore_model
    names: set[str] = set()
    for shape_name in model.shape_names:
        shape = model.shape_for(shape_name)
        if shape.type_name == "structure":
            names.update(k for k, v in shape.members.items() if v.metadata.get("sensitive"))  # type: ignore[attr-defined]
    return frozenset(names)


def _bounded(value: object) -> Any:
    if value is None:
        return None
    clean = camel(scrub(value, sensitive=sensitive_members()))
    size = len(json.dumps(clean, default=str))
    if size > MAX_PARAMETERS_BYTES:
        return {"slurmpodNote": f"{size} bytes of parameters cut (limit {MAX_PARAMETERS_BYTES})"}
    return clean


def _resources(call: Call) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for source in (call.params, call.result):
        if isinstance(source, Mapping):
            for key in ("ClusterName", "ClusterArn"):
                value = source.get(key)
                if isinstance(value, str) and value and (CLUSTER_TYPE, value[:256]) not in out:
                    out.append((CLUSTER_TYPE, value[:256]))
    return tuple(out)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def build_record(call: Call, now: float) -> AuditRecord:
    source = SOURCES.get(call.service, f"{call.service}.amazonaws.com")
    account = call.account_id or ""
    akid = call.access_key_id or ""
    read_only = is_read_only(call.event_name)
    identity: dict[str, Any] = {"type": "IAMUser", "principalId": akid, "accountId": account,
                                "accessKeyId": akid, "userName": akid}
    if account and akid:
        identity["arn"] = f"arn:aws:iam::{account}:user/{akid}"
    if call.origin.console:
        identity["sessionContext"] = {"attributes": {"mfaAuthenticated": "false"}}
    event_id = str(uuid.uuid4())
    record: dict[str, Any] = {
        "eventVersion": EVENT_VERSION,
        "userIdentity": identity,
        "eventTime": _iso(now),
        "eventSource": source,
        "eventName": call.event_name,
        "awsRegion": call.region,
        "sourceIPAddress": call.origin.source_ip,
        "userAgent": call.origin.user_agent[:1024],
    }
    if call.error_code:
        record["errorCode"] = call.error_code
        record["errorMessage"] = (call.error_message or "")[:1024]
    record["requestParameters"] = _bounded(call.params)
    record["responseElements"] = None if read_only or call.error_code else _bounded(call.result)
    record.update({
        "requestID": call.request_id,
        "eventID": event_id,
        "readOnly": read_only,
        "resources": [{"type": t, "ARN" if n.startswith("arn:") else "name": n} for t, n in _resources(call)],
        "eventType": "AwsConsoleAction" if call.service == "signin" else "AwsApiCall",
        "managementEvent": True,
        "recipientAccountId": account,
        "eventCategory": "Management",
    })
    if call.origin.console:
        record["sessionCredentialFromConsole"] = "true"
    return AuditRecord(
        event_id=event_id, event_time=now, event_name=call.event_name, event_source=source, account_id=account,
        region=call.region, access_key_id=akid, username=akid, read_only=read_only, resources=_resources(call),
        error_code=call.error_code, detail=json.dumps(record, separators=(",", ":"), default=str))
