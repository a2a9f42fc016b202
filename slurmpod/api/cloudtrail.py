"""CloudTrail's LookupEvents over the audit trail (JSON 1.1, ``com.amazonaws.cloudtrail.v20131101.
CloudTrail_20131101.LookupEvents``), answered on the SageMaker endpoint.

Shapes and errors follow botocore's ``cloudtrail/2013-11-01`` model: one lookup attribute at most (EventId,
EventName, ReadOnly, Username, ResourceType, ResourceName, EventSource, AccessKeyId), StartTime/EndTime
(inclusive), MaxResults 1-50 (default 50), an opaque NextToken bound to the criteria, newest first. A caller sees
its own account's events in the region of its call, as in CloudTrail's event history. Other CloudTrail operations
answer ``UnsupportedOperationException``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import botocore.loaders

from slurmpod.api.handlers import epoch
from slurmpod.api.pagination import decode_token, encode_token
from slurmpod.api.protocol import CLOUDTRAIL_PREFIX
from slurmpod.errors import ServiceError, UnknownOperationException, ValidationException
from slurmpod.service.audit import AuditService
from slurmpod.service.clusters import Caller
from slurmpod.store.audit import AuditFilter

TARGET_PREFIX = CLOUDTRAIL_PREFIX
MAX_RESULTS = 50
ATTRIBUTE_FIELDS = {
    "EventId": "event_id", "EventName": "event_name", "ReadOnly": "read_only", "Username": "username",
    "ResourceType": "resource_type", "ResourceName": "resource_name", "EventSource": "event_source",
    "AccessKeyId": "access_key_id",
}


@functools.cache
def known_operations() -> frozenset[str]:
    """CloudTrail's operations in the installed botocore model."""
    data = botocore.loaders.Loader().load_service_model("cloudtrail", "service-2")
    return frozenset(data["operations"])


class InvalidLookupAttributesException(ServiceError):
    code = "InvalidLookupAttributesException"


class InvalidTimeRangeException(ServiceError):
    code = "InvalidTimeRangeException"


class InvalidMaxResultsException(ServiceError):
    code = "InvalidMaxResultsException"


class InvalidNextTokenException(ServiceError):
    code = "InvalidNextTokenException"


class InvalidEventCategoryException(ServiceError):
    code = "InvalidEventCategoryException"


class UnsupportedOperationException(ServiceError):
    code = "UnsupportedOperationException"


def _filter(caller: Caller, p: Mapping[str, Any]) -> AuditFilter:
    attrs = p.get("LookupAttributes") or []
    if not isinstance(attrs, list):
        raise InvalidLookupAttributesException("LookupAttributes must be a list.")
    if len(attrs) > 1:
        raise InvalidLookupAttributesException("You can only specify one lookup attribute.")
    chosen: dict[str, Any] = {}
    for attr in attrs:
        if not isinstance(attr, Mapping) or not isinstance(attr.get("AttributeKey"), str) \
                or not isinstance(attr.get("AttributeValue"), str):
            raise InvalidLookupAttributesException("Each lookup attribute needs an AttributeKey and an AttributeValue.")
        key, value = attr["AttributeKey"], attr["AttributeValue"]
        field = ATTRIBUTE_FIELDS.get(key)
        if field is None:
            raise InvalidLookupAttributesException(
                f"Invalid attribute key '{key}': use one of {', '.join(ATTRIBUTE_FIELDS)}.")
        if not value or len(value) > 2000:
            raise InvalidLookupAttributesException("AttributeValue must be 1 to 2000 characters long.")
        if key == "ReadOnly":
            if value.lower() not in ("true", "false"):
                raise InvalidLookupAttributesException("ReadOnly must be 'true' or 'false'.")
            chosen[field] = value.lower() == "true"
        else:
            chosen[field] = value
    start = _time(p, "StartTime")
    end = _time(p, "EndTime")
    if start is not None and end is not None and start > end:
        raise InvalidTimeRangeException("Start time must be before end time.")
    return AuditFilter(account_id=caller.account_id, region=caller.region, start=start, end=end, **chosen)


def _time(p: Mapping[str, Any], name: str) -> float | None:
    value = p.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidTimeRangeException(f"{name} is not a valid timestamp.")
    try:
        return epoch(value)
    except ValidationException as exc:
        raise InvalidTimeRangeException(f"{name} is not a valid timestamp.") from exc


def lookup_events(audit: AuditService, caller: Caller, p: Mapping[str, Any]) -> dict[str, Any]:
    f = _filter(caller, p)
    limit = p.get("MaxResults", MAX_RESULTS)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RESULTS:
        raise InvalidMaxResultsException(f"MaxResults must be between 1 and {MAX_RESULTS}.")
    category = p.get("EventCategory")
    if category is not None and category != "insight":
        raise InvalidEventCategoryException(f"Invalid event category '{category}': the valid value is insight.")
    if category == "insight":  # slurmpod records management events only
        return {"Events": []}
    bound = {k: v for k, v in p.items() if k not in ("NextToken", "MaxResults")}
    cursor = None
    token = p.get("NextToken")
    if token is not None:
        if not isinstance(token, str):
            raise InvalidNextTokenException("Invalid NextToken.")
        try:
            key = decode_token(token, bound)
            cursor = (float(key[0]), int(key[1]))
        except (ValidationException, IndexError, TypeError, ValueError) as exc:
            raise InvalidNextTokenException(
                "Invalid NextToken: it is malformed or was issued for other parameters.") from exc
    rows = audit.lookup(f, cursor=cursor, limit=limit + 1)
    page = rows[:limit]
    out: dict[str, Any] = {"Events": [_event(r) for r in page]}
    if len(rows) > limit:
        out["NextToken"] = encode_token([page[-1].event_time, page[-1].seq], bound)
    return out


def _event(r: Any) -> dict[str, Any]:
    return {
        "EventId": r.event_id,
        "EventName": r.event_name,
        "ReadOnly": "true" if r.read_only else "false",
        "AccessKeyId": r.access_key_id,
        "EventTime": r.event_time,
        "EventSource": r.event_source,
        "Username": r.username,
        "Resources": [{"ResourceType": t, "ResourceName": n} for t, n in r.resources],
        "CloudTrailEvent": r.detail,
    }


def dispatch(audit: AuditService | None, op: str, params: object, caller: Caller) -> dict[str, Any]:
    if op not in known_operations():
        raise UnknownOperationException(f"Unknown operation {TARGET_PREFIX}.{op}.")
    if op != "LookupEvents" or audit is None:
        raise UnsupportedOperationException(
            f"slurmpod implements CloudTrail's LookupEvents only (over its audit trail), not {op}.")
    if not isinstance(params, Mapping):
        raise ValidationException("The request body must be a JSON object.")
    return lookup_events(audit, caller, params)
