"""Readers for JSON that earlier slurmpod versions stored with AWS wire names (a frozen format).

Spec schema 1 kept ``ScheduledUpdateConfig`` and ``Tags`` in ``extras``; software updates kept the raw
``DeploymentConfig``; event details were keyed like ``EventMetadata`` (``FailureMessage``,
``InstanceGroupScaling``). Each function turns such a value into the snake_case form today's records store,
so ``from_dict`` readers stay tolerant of old rows while the domain itself reads only typed fields. Never
extended: new members get typed fields, not entries here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEDULED_UPDATE_CONFIG = "ScheduledUpdateConfig"
TAGS = "Tags"
#: kept in a group's extras (as stored, a list of check names) until the field was typed
ON_START_DEEP_HEALTH_CHECKS = "OnStartDeepHealthChecks"


def _capacity(value: Any) -> list[Any] | None:
    if not isinstance(value, Mapping) or "Type" not in value or "Value" not in value:
        return None
    return [str(value["Type"]), int(value["Value"])]


def deployment(config: Any) -> dict[str, Any]:
    """A stored ``DeploymentConfig`` wire dict as a stored ``DeploymentSpec``."""
    config = config if isinstance(config, Mapping) else {}
    policy = config.get("RollingUpdatePolicy")
    policy = policy if isinstance(policy, Mapping) else {}
    alarms = config.get("AutoRollbackConfiguration")
    wait = config.get("WaitIntervalInSeconds")
    return {
        "batch": _capacity(policy.get("MaximumBatchSize")),
        "rollback_batch": _capacity(policy.get("RollbackMaximumBatchSize")),
        "wait_seconds": None if wait is None else int(wait),
        "rollback_alarms": None if not isinstance(alarms, list) else
        [str(a["AlarmName"]) for a in alarms if isinstance(a, Mapping) and "AlarmName" in a],
    }


def scheduled_update(config: Any) -> dict[str, Any] | None:
    """A stored ``ScheduledUpdateConfig`` wire dict as a stored ``ScheduledUpdateSpec`` (None if unusable)."""
    if not isinstance(config, Mapping) or not isinstance(config.get("ScheduleExpression"), str):
        return None
    dep = config.get("DeploymentConfig")
    return {"expression": config["ScheduleExpression"], "deployment": None if dep is None else deployment(dep)}


def tags(value: Any) -> list[tuple[str, str]]:
    """Stored wire ``Tags`` ([{"Key", "Value"}]) as (key, value) pairs."""
    if not isinstance(value, list):
        return []
    return [(str(t["Key"]), str(t["Value"])) for t in value
            if isinstance(t, Mapping) and isinstance(t.get("Key"), str) and isinstance(t.get("Value"), str)]


_SCALING = {"InstanceCount": "instance_count", "TargetCount": "target_count", "MinCount": "min_count"}


def event_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """Stored wire-keyed event details as stored ``EventDetails`` (unknown members are dropped)."""
    body: Mapping[str, Any] = details
    scaling = details.get("InstanceGroupScaling")
    if isinstance(scaling, Mapping):
        body = scaling
    out: dict[str, Any] = {}
    if isinstance(body.get("FailureMessage"), str):
        out["failure_message"] = body["FailureMessage"]
    counts = {new: body[old] for old, new in _SCALING.items() if isinstance(body.get(old), int)}
    if counts:
        out["scaling"] = counts
    return out
