"""Typed deployment, schedule, tags and event details: JSON round trips and rows stored before they existed."""

from __future__ import annotations

import json

import pytest

from slurmpod.domain import events as ev
from slurmpod.domain.model import EventDetails, GroupScaling, SoftwareUpdate
from slurmpod.domain.software import deployment_findings, deployment_of, new_software_update
from slurmpod.domain.spec import (
    CapacitySize,
    CapacitySizeType,
    ClusterSpec,
    DeepHealthCheck,
    DeploymentSpec,
    InstanceGroupSpec,
    NodeProvisioningMode,
    NodeRecovery,
    ScheduledUpdateSpec,
    Tag,
    spec_from_dict,
    to_dict,
)
from slurmpod.domain.status import SoftwareUpdateStatus, UpdatePhase

PCT = CapacitySizeType.CAPACITY_PERCENTAGE
COUNT = CapacitySizeType.INSTANCE_COUNT


def _json(value: object) -> object:
    return json.loads(json.dumps(value, sort_keys=True))


def test_spec_round_trip_keeps_typed_members() -> None:
    dep = DeploymentSpec(CapacitySize(PCT, 25), CapacitySize(COUNT, 2), 30, ("alarm",))
    spec = ClusterSpec(
        name="c", instance_groups=(InstanceGroupSpec("g", 2, scheduled_update=ScheduledUpdateSpec("rate(1 day)", dep)),
                                   InstanceGroupSpec("h", 1, scheduled_update=ScheduledUpdateSpec("rate(2 days)"))),
        node_provisioning_mode=NodeProvisioningMode.CONTINUOUS, node_recovery=NodeRecovery.NONE,
        tags=(Tag("slurmpod:webhook", "http://x"), Tag("k", "v")))
    back = spec_from_dict(_json(to_dict(spec)))  # type: ignore[arg-type]
    assert back == spec
    assert back.continuous and not back.automatic_recovery
    assert back.tag_values("slurmpod:webhook") == ["http://x"]


def test_schema_1_spec_moves_wire_members_out_of_extras() -> None:
    old = {
        "schema_version": 1, "name": "c", "node_recovery": "Automatic", "node_provisioning_mode": None,
        "extras": {"Tags": [{"Key": "slurmpod:webhook", "Value": "http://x"}], "VpcConfig": {"Subnets": ["s"]}},
        "instance_groups": [{
            "name": "g", "instance_count": 1,
            "extras": {"OnStartDeepHealthChecks": ["InstanceStress"], "ScheduledUpdateConfig": {
                "ScheduleExpression": "cron(0 3 ? * MON *)", "DeploymentConfig": {
                    "AutoRollbackConfiguration": [{"AlarmName": "a"}], "WaitIntervalInSeconds": 0,
                    "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "CAPACITY_PERCENTAGE", "Value": 50}}}}},
        }, {"name": "h", "instance_count": 1,
            "extras": {"ScheduledUpdateConfig": {"ScheduleExpression": "rate(1 day)"}}}],
    }
    spec = spec_from_dict(old)
    assert spec.tags == (Tag("slurmpod:webhook", "http://x"),)
    assert dict(spec.extras) == {"VpcConfig": {"Subnets": ["s"]}}
    assert spec.node_recovery is NodeRecovery.AUTOMATIC
    g, h = spec.instance_groups
    assert dict(g.extras) == {}  # typed since: OnStartDeepHealthChecks stored in extras is read into its field
    assert g.deep_health_checks == (DeepHealthCheck.INSTANCE_STRESS,)
    assert g.scheduled_update == ScheduledUpdateSpec(
        "cron(0 3 ? * MON *)", DeploymentSpec(batch=CapacitySize(PCT, 50), wait_seconds=0, rollback_alarms=("a",)))
    assert h.scheduled_update == ScheduledUpdateSpec("rate(1 day)")


def test_deployment_defaults_and_batch_sizes() -> None:
    empty = DeploymentSpec()
    assert empty.empty and empty.effective_batch == CapacitySize(COUNT, 1) and empty.effective_wait_seconds == 0
    dep = DeploymentSpec(batch=CapacitySize(PCT, 50))
    assert dep.effective_rollback_batch == dep.batch  # rollback batches default to the update's
    assert CapacitySize(PCT, 50).size(5) == 3 and CapacitySize(PCT, 1).size(3) == 1
    assert CapacitySize(COUNT, 0).size(9) == 1
    assert deployment_findings(DeploymentSpec(CapacitySize(PCT, 0), CapacitySize(PCT, 101))) == [
        "CAPACITY_PERCENTAGE must be between 1 and 100, got 0.",
        "CAPACITY_PERCENTAGE must be between 1 and 100, got 101.",
    ]


def test_software_update_round_trip_and_effective_values() -> None:
    dep = DeploymentSpec(batch=CapacitySize(COUNT, 2), wait_seconds=5)
    su = new_software_update("op", "ami-1", ["g"], dep, 10.0)
    assert (su.batch, su.rollback_batch, su.wait_seconds, su.phase) == (dep.batch, dep.batch, 5, UpdatePhase.UPDATE)
    assert SoftwareUpdate.from_dict(_json(su.to_dict())) == su  # type: ignore[arg-type]


def test_software_update_row_with_raw_deployment_config_loads() -> None:
    old = {"operation_id": "op", "target_image": "ami-1", "groups": ["g"], "batch": ["INSTANCE_COUNT", 2],
           "rollback_batch": ["INSTANCE_COUNT", 2], "wait_seconds": 7, "started": 1.0, "phase": "rollback",
           "done": {"i-1": "ami-0"}, "failed": {}, "last_batch_end": 2.0, "batches": 1,
           "config": {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2}},
                      "WaitIntervalInSeconds": 7}}
    su = SoftwareUpdate.from_dict(old)
    assert su.deployment == DeploymentSpec(batch=CapacitySize(COUNT, 2), wait_seconds=7)
    assert su.phase is UpdatePhase.ROLLBACK and su.done == {"i-1": "ami-0"} and su.batches == 1
    assert su.wait_seconds == 7 and su.rollback_batch == CapacitySize(COUNT, 2)


@pytest.mark.parametrize(("stored", "expected"), [
    ({}, EventDetails()),
    ({"failure_message": "boom"}, EventDetails("boom")),
    ({"scaling": {"instance_count": 1, "target_count": 3, "min_count": 2}}, EventDetails(None, GroupScaling(1, 3, 2))),
    ({"FailureMessage": "boom"}, EventDetails("boom")),  # rows written before EventDetails
    ({"InstanceGroupScaling": {"InstanceCount": 0, "TargetCount": 2, "MinCount": 1, "FailureMessage": "late"}},
     EventDetails("late", GroupScaling(0, 2, 1))),
    ({"n": 1, "why": ["x"]}, EventDetails()),
])
def test_event_details_from_dict(stored: dict[str, object], expected: EventDetails) -> None:
    got = EventDetails.from_dict(stored)
    assert got == expected
    assert EventDetails.from_dict(_json(got.to_dict())) == got  # type: ignore[arg-type]


def test_drafts_with_old_mapping_details_still_finish() -> None:
    draft = ev.EventDraft(ev.ResourceType.CLUSTER, ev.EventLevel.ERROR, "x", details={"FailureMessage": "m"})
    assert ev.as_details(draft.details) == EventDetails("m")
    assert ev.drift_detected(["a", "b"]).details == EventDetails("Configuration drift detected. a; b")


def test_deployment_of_a_group_without_schedule_is_the_default() -> None:
    from slurmpod.domain.model import ClusterRecord
    from slurmpod.domain.status import ClusterStatus
    spec = ClusterSpec("c", (InstanceGroupSpec("g", 1), InstanceGroupSpec(
        "h", 1, scheduled_update=ScheduledUpdateSpec("rate(1 day)", DeploymentSpec(wait_seconds=3)))))
    rec = ClusterRecord("id", "acct", "r", "c", "arn", spec, ClusterStatus.IN_SERVICE, 0.0)
    assert deployment_of(rec, "g") == DeploymentSpec()
    assert deployment_of(rec, "h") == DeploymentSpec(wait_seconds=3)
    assert SoftwareUpdateStatus("InProgress") is SoftwareUpdateStatus.IN_PROGRESS
