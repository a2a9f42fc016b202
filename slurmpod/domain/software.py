"""Software-update requests (pure): DeploymentConfig -> SoftwareUpdate, and scheduled updates that are due."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurmpod.domain.model import BatchPolicy, ClusterRecord, SoftwareUpdate
from slurmpod.domain.schedule import ScheduleError, due, parse_schedule

SCHEDULED_UPDATE_CONFIG = "ScheduledUpdateConfig"


def batch_policy(value: Mapping[str, Any] | None) -> BatchPolicy | None:
    if not value:
        return None
    return BatchPolicy(str(value["Type"]), int(value["Value"]))


def new_software_update(
    operation_id: str, target_image: str, groups: Sequence[str], deployment: Mapping[str, Any], now: float
) -> SoftwareUpdate:
    policy = deployment.get("RollingUpdatePolicy") or {}
    batch = batch_policy(policy.get("MaximumBatchSize")) or BatchPolicy("INSTANCE_COUNT", 1)
    return SoftwareUpdate(
        operation_id=operation_id,
        target_image=target_image,
        groups=tuple(groups),
        batch=batch,
        rollback_batch=batch_policy(policy.get("RollbackMaximumBatchSize")) or batch,
        wait_seconds=int(deployment.get("WaitIntervalInSeconds") or 0),
        started=now,
        config=dict(deployment),
    )


def schedule_findings(spec_groups: Sequence[Any], now: float) -> list[str]:
    """Every group's ScheduleExpression must parse (and be able to fire after ``now``)."""
    findings: list[str] = []
    for g in spec_groups:
        cfg = g.extras.get(SCHEDULED_UPDATE_CONFIG)
        if isinstance(cfg, Mapping) and isinstance(cfg.get("ScheduleExpression"), str):
            try:
                parse_schedule(cfg["ScheduleExpression"], now=now)
            except ScheduleError as exc:
                findings.append(exc.message)
    return findings


def refresh_schedules(cluster: ClusterRecord, now: float) -> dict[str, dict[str, Any]]:
    """Schedule bookkeeping for the current spec: a new or changed expression starts counting from now."""
    out: dict[str, dict[str, Any]] = {}
    for g in cluster.spec.instance_groups:
        cfg = g.extras.get(SCHEDULED_UPDATE_CONFIG)
        if not isinstance(cfg, Mapping) or not isinstance(cfg.get("ScheduleExpression"), str):
            continue
        old = cluster.schedules.get(g.name)
        if old is not None and old.get("expression") == cfg["ScheduleExpression"]:
            out[g.name] = dict(old)
        else:
            out[g.name] = {"expression": cfg["ScheduleExpression"], "since": now, "last_fired": None}
    return out


def due_schedules(cluster: ClusterRecord, now: float) -> dict[str, float]:
    """group -> the fire time to act on now (catch up once after downtime, never repeatedly)."""
    fired: dict[str, float] = {}
    for group, st in cluster.schedules.items():
        try:
            sched = parse_schedule(str(st["expression"]))
        except ScheduleError:
            continue
        t = due(sched, st.get("last_fired"), float(st["since"]), now)
        if t is not None:
            fired[group] = t
    return fired


def deployment_of(cluster: ClusterRecord, group: str) -> Mapping[str, Any]:
    g = cluster.spec.group(group)
    cfg = g.extras.get(SCHEDULED_UPDATE_CONFIG) if g else None
    return dict(cfg.get("DeploymentConfig") or {}) if isinstance(cfg, Mapping) else {}
