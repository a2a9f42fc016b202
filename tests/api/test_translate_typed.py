"""api/translate.py: deployment, schedule and tags parsed into typed specs and echoed exactly as requested."""

from __future__ import annotations

import json
from typing import Any

from slurmpod.api import translate as tr
from slurmpod.api.events import event_metadata
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, EventDetails, EventRecord, GroupScaling
from slurmpod.domain.spec import NodeProvisioningMode, NodeRecovery, Tag, spec_from_dict, to_dict
from slurmpod.domain.status import ClusterStatus, EventLevel, ImageVersionStatus, InstanceGroupStatus, ResourceType

DEPLOYMENT: dict[str, Any] = {
    "WaitIntervalInSeconds": 60,
    "AutoRollbackConfiguration": [{"AlarmName": "a1"}, {"AlarmName": "a0"}],
    "RollingUpdatePolicy": {"RollbackMaximumBatchSize": {"Value": 3, "Type": "INSTANCE_COUNT"},
                            "MaximumBatchSize": {"Value": 50, "Type": "CAPACITY_PERCENTAGE"}},
}


def _sorted(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def test_deployment_round_trip_is_the_request_in_stored_order() -> None:
    one = {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1}}
    wires: list[dict[str, Any]] = [DEPLOYMENT, {}, {"WaitIntervalInSeconds": 0}, {"RollingUpdatePolicy": one},
                                   {"AutoRollbackConfiguration": []}]
    for wire in wires:
        back = tr.deployment_to_wire(tr.deployment_from_wire(wire))
        assert json.dumps(back) == _sorted(wire)


def _create(group_extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "ClusterName": "c", "NodeRecovery": "None", "NodeProvisioningMode": "Continuous",
        "Tags": [{"Key": "slurmpod:webhook", "Value": "http://x"}],
        "InstanceGroups": [{"InstanceGroupName": "g", "InstanceCount": 1, "InstanceType": "ml.t3.medium",
                            "ExecutionRole": "r", **group_extra}],
    }


def test_group_echo_matches_the_stored_wire_form() -> None:
    extra = {"ScheduledUpdateConfig": {"ScheduleExpression": "cron(0 3 ? * MON *)", "DeploymentConfig": DEPLOYMENT},
             "OnStartDeepHealthChecks": ["InstanceStress"], "InstanceStorageConfigs": [{"EbsVolumeConfig": {}}]}
    spec = spec_from_dict(json.loads(json.dumps(to_dict(tr.spec_from_create(_create(extra))), sort_keys=True)))
    assert spec.tags == (Tag("slurmpod:webhook", "http://x"),)
    assert spec.node_recovery is NodeRecovery.NONE and spec.node_provisioning_mode is NodeProvisioningMode.CONTINUOUS
    rec = ClusterRecord("id", "acct", "r", "c", "arn", spec, ClusterStatus.IN_SERVICE, 0.0)
    image = tr.ImageView("ami-1", "ami-1", ImageVersionStatus.UP_TO_DATE)
    out = tr.group_details(rec, spec.instance_groups[0], InstanceGroupStatus.IN_SERVICE, 1, image)
    echoed = {k: out[k] for k in ("InstanceStorageConfigs", "OnStartDeepHealthChecks", "ScheduledUpdateConfig")}
    assert json.dumps(echoed) == _sorted(extra)  # same members, same (sorted) order as before they were typed
    assert list(out)[-3:] == sorted(echoed)
    described = tr.describe_cluster(rec, [out])
    assert described["NodeRecovery"] == "None" and described["NodeProvisioningMode"] == "Continuous"
    assert "Tags" not in described


def test_schedule_without_deployment_and_with_empty_deployment() -> None:
    for cfg in ({"ScheduleExpression": "rate(1 day)"}, {"ScheduleExpression": "rate(1 day)", "DeploymentConfig": {}}):
        g = tr.spec_from_create(_create({"ScheduledUpdateConfig": cfg})).instance_groups[0]
        assert g.scheduled_update is not None and "ScheduledUpdateConfig" not in g.extras
        assert tr.scheduled_update_to_wire(g.scheduled_update) == cfg


def test_update_keeps_tags_and_recovery_when_omitted() -> None:
    current = tr.spec_from_create(_create({}))
    spec, _ = tr.spec_from_update({"ClusterName": "c"}, current)
    assert spec.tags == current.tags and spec.node_recovery is NodeRecovery.NONE
    spec, _ = tr.spec_from_update({"ClusterName": "c", "NodeRecovery": "Automatic"}, current)
    assert spec.node_recovery is NodeRecovery.AUTOMATIC


def _event(resource: ResourceType, details: EventDetails) -> EventRecord:
    return EventRecord("e", "id", "c", "arn", resource, EventLevel.INFO, "d", 0.0, group="g", details=details)


def test_event_metadata_from_typed_details() -> None:
    assert event_metadata(_event(ResourceType.CLUSTER, EventDetails())) is None
    assert event_metadata(_event(ResourceType.CLUSTER, EventDetails("boom"))) == {"Cluster": {"FailureMessage": "boom"}}
    assert event_metadata(_event(ResourceType.INSTANCE, EventDetails("x")), {"NodeLogicalId": "g-1"}) == {
        "Instance": {"FailureMessage": "x", "NodeLogicalId": "g-1"}}
    scaled = ev.min_count_rollback("c", "g", 0, 2, 1, 0, "late")
    meta = event_metadata(_event(ResourceType.INSTANCE_GROUP, ev.as_details(scaled.details)))
    assert json.dumps(meta) == json.dumps({"InstanceGroupScaling": {
        "FailureMessage": "late", "InstanceCount": 0, "MinCount": 1, "TargetCount": 2}})
    assert ev.as_details(ev.min_capacity_reached("c", "g", 2, 3, 2).details).scaling == GroupScaling(2, 3, 2)
