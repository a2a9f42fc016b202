"""Row <-> record mappers between the tables of ``store.tables`` and the records of ``domain.model``.

JSON columns are written canonically (sorted keys, no spaces) so equal records give equal rows.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import Row

from slurmpod.domain.model import (
    ClusterRecord,
    EventDetails,
    EventRecord,
    GroupState,
    NodeRecord,
    SoftwareUpdate,
    software_update_status_from_dict,
)
from slurmpod.domain.spec import spec_from_dict, to_dict
from slurmpod.domain.status import ClusterStatus, EventLevel, InstanceStatus, ResourceType


def dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def cluster_from_row(row: Row[Any] | tuple[Any, ...]) -> ClusterRecord:
    """A ``select(clusters)`` row (a Core ``Row`` or the DBAPI's tuple: positional, in the table's column order)."""
    (cluster_id, account_id, region, name, arn, spec, last_good_spec, status, failure_message, operation_id,
     applied_topology, lifecycle_snapshots, group_states, software_update, software_update_status, schedules,
     provider, creation_time, generation, version) = tuple(row)
    return ClusterRecord(
        cluster_id=cluster_id,
        account_id=account_id,
        region=region,
        name=name,
        arn=arn,
        spec=spec_from_dict(json.loads(spec)),
        status=ClusterStatus(status),
        creation_time=creation_time,
        last_good_spec=spec_from_dict(json.loads(last_good_spec)) if last_good_spec else None,
        failure_message=failure_message,
        operation_id=operation_id,
        applied_topology=applied_topology,
        generation=generation,
        version=version,
        lifecycle_snapshots=json.loads(lifecycle_snapshots or "{}"),
        provider=provider,
        group_states={k: GroupState.from_dict(v) for k, v in json.loads(group_states or "{}").items()},
        software_update=SoftwareUpdate.from_dict(json.loads(software_update)) if software_update else None,
        software_update_status=software_update_status_from_dict(json.loads(software_update_status or "{}")),
        schedules=json.loads(schedules or "{}"),
    )


def cluster_values(rec: ClusterRecord) -> dict[str, Any]:
    return {
        "cluster_id": rec.cluster_id,
        "account_id": rec.account_id,
        "region": rec.region,
        "name": rec.name,
        "arn": rec.arn,
        "spec": dump(to_dict(rec.spec)),
        "last_good_spec": dump(to_dict(rec.last_good_spec)) if rec.last_good_spec else None,
        "status": rec.status.value,
        "failure_message": rec.failure_message,
        "operation_id": rec.operation_id,
        "applied_topology": rec.applied_topology,
        "lifecycle_snapshots": dump(dict(rec.lifecycle_snapshots)),
        "provider": rec.provider,
        "group_states": dump({k: v.to_dict() for k, v in rec.group_states.items()}),
        "software_update": dump(rec.software_update.to_dict()) if rec.software_update else None,
        "software_update_status": dump(dict(rec.software_update_status)),
        "schedules": dump({k: dict(v) for k, v in rec.schedules.items()}),
        "creation_time": rec.creation_time,
        "generation": rec.generation,
        "version": rec.version,
    }


_STATUS = {s.value: s for s in InstanceStatus}


def node_from_row(row: Row[Any] | tuple[Any, ...]) -> NodeRecord:
    # positional access (``select(nodes)`` returns the table's columns in order) and no JSON parse of an
    # empty ``data``: Row._mapping per column cost more than the rest when a pass reads 10,000 rows
    (instance_id, cluster_id, group_name, seq, status, message, launch_time, ip, hostname, logical_id, image_id,
     image_release, lifecycle_digest, last_software_update_time, phases, attempts, next_attempt, data,
     version) = tuple(row)
    return NodeRecord(
        instance_id=instance_id,
        cluster_id=cluster_id,
        group=group_name,
        seq=seq,
        status=_STATUS.get(status) or InstanceStatus(status),
        message=message,
        launch_time=launch_time,
        ip=ip,
        hostname=hostname,
        logical_id=logical_id,
        image_id=image_id,
        image_release=image_release,
        lifecycle_digest=lifecycle_digest,
        last_software_update_time=last_software_update_time,
        phases=tuple(p for p in phases.split(",") if p) if phases else (),
        attempts=attempts,
        next_attempt=next_attempt,
        data=json.loads(data) if data and data != "{}" else {},
        version=version,
    )


def node_values(rec: NodeRecord) -> dict[str, Any]:
    return {
        "instance_id": rec.instance_id,
        "cluster_id": rec.cluster_id,
        "group_name": rec.group,
        "seq": rec.seq,
        "status": rec.status.value,
        "message": rec.message,
        "launch_time": rec.launch_time,
        "ip": rec.ip,
        "hostname": rec.hostname,
        "logical_id": rec.logical_id,
        "image_id": rec.image_id,
        "image_release": rec.image_release,
        "lifecycle_digest": rec.lifecycle_digest,
        "last_software_update_time": rec.last_software_update_time,
        "phases": ",".join(rec.phases),
        "attempts": rec.attempts,
        "next_attempt": rec.next_attempt,
        "data": dump(dict(rec.data)),
        "version": rec.version,
    }


def event_from_row(row: Row[Any]) -> EventRecord:
    m = row._mapping
    return EventRecord(
        event_id=m["event_id"],
        cluster_id=m["cluster_id"],
        cluster_name=m["cluster_name"],
        cluster_arn=m["cluster_arn"],
        resource_type=ResourceType(m["resource_type"]),
        level=EventLevel(m["level"]),
        description=m["description"],
        event_time=m["event_time"],
        group=m["group_name"],
        instance_id=m["instance_id"],
        operation_id=m["operation_id"],
        details=EventDetails.from_dict(json.loads(m["details"] or "{}")),
        seq=m["seq"],
    )


def event_values(ev: EventRecord) -> dict[str, Any]:
    return {
        "event_id": ev.event_id,
        "cluster_id": ev.cluster_id,
        "cluster_name": ev.cluster_name,
        "cluster_arn": ev.cluster_arn,
        "resource_type": ev.resource_type.value,
        "level": ev.level.value,
        "description": ev.description,
        "event_time": ev.event_time,
        "group_name": ev.group,
        "instance_id": ev.instance_id,
        "operation_id": ev.operation_id,
        "details": dump(ev.details.to_dict()),
    }
