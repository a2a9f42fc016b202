"""Software-update requests (pure): DeploymentSpec -> SoftwareUpdate, and scheduled updates that are due."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurmpod.domain.model import ClusterRecord, SoftwareUpdate
from slurmpod.domain.schedule import ScheduleError, due, parse_schedule
from slurmpod.domain.spec import CapacitySizeType, DeploymentSpec, InstanceGroupSpec


def new_software_update(
    operation_id: str, target_image: str, groups: Sequence[str], deployment: DeploymentSpec, now: float,
    slurm_upgrade: bool = False,
) -> SoftwareUpdate:
    return SoftwareUpdate(
        operation_id=operation_id,
        target_image=target_image,
        groups=tuple(groups),
        deployment=deployment,
        started=now,
        slurm_upgrade=slurm_upgrade,
    )


def deployment_findings(deployment: DeploymentSpec) -> list[str]:
    """A percentage batch size must be 1..100 (the model bounds only the value's type)."""
    findings: list[str] = []
    for b in (deployment.batch, deployment.rollback_batch):
        if b is not None and b.type == CapacitySizeType.CAPACITY_PERCENTAGE and not 1 <= b.value <= 100:
            findings.append(f"CAPACITY_PERCENTAGE must be between 1 and 100, got {b.value}.")
    return findings


def schedule_findings(spec_groups: Sequence[InstanceGroupSpec], now: float) -> list[str]:
    """Every group's schedule expression must parse (and be able to fire after ``now``)."""
    findings: list[str] = []
    for g in spec_groups:
        if g.scheduled_update is not None:
            try:
                parse_schedule(g.scheduled_update.expression, now=now)
            except ScheduleError as exc:
                findings.append(exc.message)
    return findings


def refresh_schedules(cluster: ClusterRecord, now: float) -> dict[str, dict[str, Any]]:
    """Schedule bookkeeping for the current spec: a new or changed expression starts counting from now."""
    out: dict[str, dict[str, Any]] = {}
    for g in cluster.spec.instance_groups:
        if g.scheduled_update is None:
            continue
        expression = g.scheduled_update.expression
        old = cluster.schedules.get(g.name)
        if old is not None and old.get("expression") == expression:
            out[g.name] = dict(old)
        else:
            out[g.name] = {"expression": expression, "since": now, "last_fired": None}
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


def deployment_of(cluster: ClusterRecord, group: str) -> DeploymentSpec:
    """The deployment a group's scheduled update starts (HyperPod's defaults when it names none)."""
    g = cluster.spec.group(group)
    scheduled = g.scheduled_update if g else None
    return (scheduled.deployment if scheduled else None) or DeploymentSpec()
