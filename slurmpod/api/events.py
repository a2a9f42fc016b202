"""ListClusterEvents and DescribeClusterEvent: handlers plus EventRecord -> wire translation.

Wire members are taken from the installed botocore model, so a member the model does not have is never
emitted (and members a newer model adds, such as ``OperationId``, light up automatically). Pagination is
a keyset on ``(event_time, seq)`` done in SQL, with the opaque, filter-bound tokens of ``api.pagination``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import botocore.model

from slurmpod.api.contract.model import get_model
from slurmpod.api.pagination import decode_token, encode_token
from slurmpod.domain.model import ClusterRecord, EventDetails, EventRecord
from slurmpod.domain.status import ResourceType
from slurmpod.errors import ResourceNotFound, ValidationException
from slurmpod.service.clusters import Caller, ClusterService

Params = Mapping[str, Any]

DEFAULT_MAX_RESULTS = 100
# ResourceType -> EventMetadata union member (InstanceGroup events carrying counts use InstanceGroupScaling).
_METADATA_MEMBER = {
    ResourceType.CLUSTER: "Cluster",
    ResourceType.INSTANCE_GROUP: "InstanceGroup",
    ResourceType.INSTANCE: "Instance",
}


# ---- model look-ups ------------------------------------------------------------------------------


def _shape(name: str) -> botocore.model.Shape:
    return get_model().botocore_model.shape_for(name)


@functools.cache
def _members(shape_name: str) -> frozenset[str]:
    shape = _shape(shape_name)
    assert isinstance(shape, botocore.model.StructureShape)  # noqa: S101 - model invariant
    return frozenset(shape.members)


@functools.cache
def _input_members(operation: str) -> frozenset[str]:
    shape = get_model().input_shape(operation)
    return frozenset(shape.members) if shape is not None else frozenset()


def _fits(shape: botocore.model.Shape, value: Any) -> bool:
    """Whether ``value`` can be emitted as ``shape`` (so odd details never break a response)."""
    kind = shape.type_name
    if kind == "string":
        return isinstance(value, str) and (not shape.enum or value in shape.enum)
    if kind in ("integer", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("double", "float"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "list":
        assert isinstance(shape, botocore.model.ListShape)  # noqa: S101
        return isinstance(value, list | tuple) and all(_fits(shape.member, v) for v in value)
    if kind == "structure":
        assert isinstance(shape, botocore.model.StructureShape)  # noqa: S101
        return (
            isinstance(value, Mapping)
            and all(k in shape.members and (v is None or _fits(shape.members[k], v)) for k, v in value.items())
            and all(value.get(r) is not None for r in shape.required_members)
        )
    return False


def _shaped(shape: botocore.model.StructureShape, data: Mapping[str, Any]) -> dict[str, Any]:
    """The members of ``data`` the structure has and whose values fit (others are dropped)."""
    return {
        k: v for k, v in data.items()
        if v is not None and k in shape.members and _fits(shape.members[k], v)
    }


# ---- translation -----------------------------------------------------------------------------------


def _common(e: EventRecord, allowed: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "EventId": e.event_id,
        "ClusterArn": e.cluster_arn,
        "ClusterName": e.cluster_name,
        "InstanceGroupName": e.group,
        "InstanceId": e.instance_id,
        "ResourceType": e.resource_type.value,
        "EventTime": e.event_time,
        "Description": e.description,
        "EventLevel": e.level.value,
        "OperationId": e.operation_id,
    }
    return {k: v for k, v in out.items() if k in allowed and v is not None}


def event_summary(e: EventRecord) -> dict[str, Any]:
    """An EventRecord as a wire ``ClusterEventSummary``."""
    return _common(e, _members("ClusterEventSummary"))


def _metadata_body(details: EventDetails) -> dict[str, Any]:
    """The wire members of ``details`` (in sorted order, as events stored wire-keyed details before)."""
    out: dict[str, Any] = {}
    if details.failure_message is not None:
        out["FailureMessage"] = details.failure_message
    if details.scaling is not None:
        s = details.scaling
        out.update({"InstanceCount": s.instance_count, "MinCount": s.min_count, "TargetCount": s.target_count})
    return out


def event_metadata(e: EventRecord, extra: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``EventMetadata`` union for an event (exactly one member), or None when there is nothing to say.

    The member is the event's ResourceType; an InstanceGroup event with scaling counts uses
    ``InstanceGroupScaling``. ``extra`` adds wire members (``NodeLogicalId``) the store knows elsewhere.
    """
    union = _shape("EventMetadata")
    assert isinstance(union, botocore.model.StructureShape)  # noqa: S101
    member = _METADATA_MEMBER[e.resource_type]
    if e.details.scaling is not None and "InstanceGroupScaling" in union.members:
        member = "InstanceGroupScaling"
    body = {**_metadata_body(e.details), **(extra or {})}
    target = union.members.get(member)
    if not isinstance(target, botocore.model.StructureShape):
        return None
    shaped = _shaped(target, body)
    return {member: shaped} if shaped else None


def event_detail(e: EventRecord, extra_metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An EventRecord as a wire ``ClusterEventDetail`` (with ``EventDetails.EventMetadata`` when known)."""
    allowed = _members("ClusterEventDetail")
    out = _common(e, allowed)
    meta = event_metadata(e, extra_metadata)
    if meta and "EventDetails" in allowed:
        out["EventDetails"] = {"EventMetadata": meta}
    return out


# ---- handlers --------------------------------------------------------------------------------------


def _epoch(value: Any) -> float | None:
    """A wire timestamp (epoch number or ISO 8601 text, both accepted by input validation) in seconds."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError as exc:  # pragma: no cover - input validation rejects these first
        raise ValidationException(f"Invalid timestamp {value!r}.") from exc


def _cluster_for_events(svc: ClusterService, caller: Caller, name_or_arn: str, operation: str) -> ClusterRecord:
    rec = svc.resolve(caller, name_or_arn)
    if svc.strict and not rec.spec.continuous:
        raise ValidationException(
            f"{operation} is only supported for cluster with NodeProvisioningMode set to Continuous"
        )
    return rec


def list_cluster_events(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    """ListClusterEvents: filters, EventTime ordering (default Descending), keyset pagination."""
    rec = _cluster_for_events(svc, caller, p["ClusterName"], "ListClusterEvents")
    known = _input_members("ListClusterEvents")
    descending = p.get("SortOrder", "Descending") == "Descending"
    after, before = _epoch(p.get("EventTimeAfter")), _epoch(p.get("EventTimeBefore"))
    operation_id = p.get("OperationId") if "OperationId" in known else None
    filters = {
        "Cluster": rec.cluster_id,
        "InstanceGroupName": p.get("InstanceGroupName"),
        "NodeId": p.get("NodeId"),
        "ResourceType": p.get("ResourceType"),
        "OperationId": operation_id,
        "EventTimeAfter": after,
        "EventTimeBefore": before,
        "SortBy": p.get("SortBy", "EventTime"),
        "SortOrder": "Descending" if descending else "Ascending",
    }
    cursor: tuple[float, int] | None = None
    token = p.get("NextToken")
    if token:
        key = decode_token(token, filters)
        if len(key) != 2 or not isinstance(key[0], int | float) or not isinstance(key[1], int):
            raise ValidationException("Invalid pagination token: NextToken is malformed.")
        cursor = (float(key[0]), int(key[1]))
    limit = int(p.get("MaxResults") or DEFAULT_MAX_RESULTS)
    rows = svc.store.list_events_filtered(
        rec.cluster_id,
        group=p.get("InstanceGroupName"),
        instance_id=p.get("NodeId"),
        resource_type=p.get("ResourceType"),
        operation_id=operation_id,
        after=after,
        before=before,
        descending=descending,
        cursor=cursor,
        limit=limit + 1,
    )
    page = rows[:limit]
    out: dict[str, Any] = {"Events": [event_summary(e) for e in page]}
    if len(rows) > limit:
        last = page[-1]
        out["NextToken"] = encode_token((last.event_time, last.seq), filters)
    return out


def describe_cluster_event(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    """DescribeClusterEvent: one event with its metadata; ResourceNotFound for an unknown id."""
    rec = _cluster_for_events(svc, caller, p["ClusterName"], "DescribeClusterEvent")
    event = svc.store.get_event(rec.cluster_id, p["EventId"])
    if event is None:
        raise ResourceNotFound(f"Event {p['EventId']} not found in cluster {rec.name}.")
    extra: dict[str, Any] = {}
    if event.resource_type == ResourceType.INSTANCE and event.instance_id:
        node = svc.store.get_node(event.instance_id)
        if node is not None and node.cluster_id == rec.cluster_id and node.logical_id:
            extra["NodeLogicalId"] = node.logical_id
    return {"EventDetails": event_detail(event, extra)}
