"""UpdateClusterSoftware on the simulated provider: rolling batches, statuses, events, rollback, conflicts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurmpod.lifecycle.images import ImageCatalog
from slurmpod.settings import Settings
from tests.serverproc import free_port, seed_groups, thread_server, wait_status


@pytest.fixture
def srv(tmp_path: Path):
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.05)
    with thread_server(settings) as s:
        yield s


def _publish(srv) -> str:
    catalog = ImageCatalog(srv.server.store)
    return catalog.publish(base=None, script="echo new", description="", now=time.time()).image_id


def _events(c, name):
    return [e["Description"] for e in
            c.list_cluster_events(ClusterName=name, SortOrder="Ascending", MaxResults=100)["Events"]]


def test_rolling_update_in_batches(srv):
    c = srv.client()
    c.create_cluster(ClusterName="su", InstanceGroups=seed_groups(4))
    wait_status(c, "su", {"InService"})
    before = {n["InstanceId"]: n for n in c.list_cluster_nodes(ClusterName="su")["ClusterNodeSummaries"]}
    new = _publish(srv)
    d = c.describe_cluster(ClusterName="su")
    assert {g["ImageVersionStatus"] for g in d["InstanceGroups"]} == {"UpdateAvailable"}
    assert {g["DesiredImageId"] for g in d["InstanceGroups"]} == {new}
    c.update_cluster_software(ClusterName="su", InstanceGroups=[{"InstanceGroupName": "compute-group"}],
                              DeploymentConfig={"RollingUpdatePolicy": {
                                  "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2}},
                                  "WaitIntervalInSeconds": 0})
    assert c.describe_cluster(ClusterName="su")["ClusterStatus"] == "SystemUpdating"
    with pytest.raises(c.exceptions.ConflictException):
        c.update_cluster_software(ClusterName="su")
    d = wait_status(c, "su", {"InService"}, timeout=60)
    groups = {g["InstanceGroupName"]: g for g in d["InstanceGroups"]}
    assert groups["compute-group"]["SoftwareUpdateStatus"] == "Succeeded"
    assert groups["compute-group"]["ImageVersionStatus"] == "UpToDate"
    assert groups["controller-group"]["ImageVersionStatus"] == "UpdateAvailable"  # not in scope
    after = {n["InstanceId"]: n for n in c.list_cluster_nodes(ClusterName="su")["ClusterNodeSummaries"]}
    assert after.keys() == before.keys()
    for iid, n in after.items():
        assert n["LaunchTime"] == before[iid]["LaunchTime"]
        if n["InstanceGroupName"] == "compute-group":
            assert n["ImageVersionStatus"] == "UpToDate" and n["LastSoftwareUpdateTime"] >= n["LaunchTime"]
            assert c.describe_cluster_node(ClusterName="su", NodeId=iid)["NodeDetails"]["CurrentImageId"] == new
    texts = _events(c, "su")
    assert sum(t.startswith("Next update batch selected for IG compute-group") for t in texts) == 2
    assert sum(t.startswith("Root volume replacement started for Instance") for t in texts) == 4
    assert any(t == "UpdateClusterSoftware completed successfully for IG compute-group in Cluster su." for t in texts)


def test_group_naming_an_image_follows_the_update(srv):
    """A group whose spec names an ImageId names the target after a successful update: DesiredImageId, the
    version status and nodes launched later follow it (they would boot the old image otherwise)."""
    c = srv.client()
    first = _publish(srv)
    groups = seed_groups(1)
    for g in groups:
        g["ImageId"] = first
    c.create_cluster(ClusterName="pin", InstanceGroups=groups)
    wait_status(c, "pin", {"InService"})
    second = _publish(srv)
    c.update_cluster_software(ClusterName="pin", ImageId=second)
    d = wait_status(c, "pin", {"InService"}, timeout=60)
    assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {second}
    assert {g["DesiredImageId"] for g in d["InstanceGroups"]} == {second}
    assert {g["ImageVersionStatus"] for g in d["InstanceGroups"]} == {"UpToDate"}
    # groups that omit ImageId keep the one their spec names: the update's target now
    c.update_cluster(ClusterName="pin", InstanceGroups=[
        {**{k: v for k, v in g.items() if k != "ImageId"},
         "InstanceCount": 2 if g["InstanceGroupName"] == "compute-group" else g["InstanceCount"]} for g in groups])
    deadline = time.monotonic() + 30
    while len(nodes := c.list_cluster_nodes(ClusterName="pin", InstanceGroupNameContains="compute")
              ["ClusterNodeSummaries"]) < 2 or any(n["InstanceStatus"]["Status"] != "Running" for n in nodes):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for n in nodes:
        assert c.describe_cluster_node(ClusterName="pin", NodeId=n["InstanceId"])["NodeDetails"]["CurrentImageId"] \
            == second


def test_failed_update_rolls_back(srv):
    c = srv.client()
    c.create_cluster(ClusterName="rb", InstanceGroups=seed_groups(3))
    wait_status(c, "rb", {"InService"})
    old = c.list_cluster_nodes(ClusterName="rb")["ClusterNodeSummaries"]
    new = _publish(srv)
    srv.server.runtime.fail_images.add(new)
    c.update_cluster_software(ClusterName="rb", ImageId=new, InstanceGroups=[{"InstanceGroupName": "compute-group"}])
    d = wait_status(c, "rb", {"InService"}, timeout=60)
    g = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "compute-group")
    assert g["SoftwareUpdateStatus"] == "RollbackComplete"
    assert "failed and was rolled back" in d["FailureMessage"]
    texts = _events(c, "rb")
    assert any("failed to update. Rollback initiated." in t for t in texts)
    images = {n["InstanceId"]: c.describe_cluster_node(ClusterName="rb", NodeId=n["InstanceId"])["NodeDetails"]
              for n in old}
    assert all(v["CurrentImageId"] != new for v in images.values())


def test_update_software_validation(srv):
    c = srv.client()
    c.create_cluster(ClusterName="v", InstanceGroups=seed_groups(1))
    with pytest.raises(c.exceptions.ConflictException):
        c.update_cluster_software(ClusterName="v")  # still Creating
    wait_status(c, "v", {"InService"})
    with pytest.raises(c.exceptions.ClientError) as e:
        c.update_cluster_software(ClusterName="v", InstanceGroups=[{"InstanceGroupName": "nope"}])
    assert e.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(c.exceptions.ClientError) as e:
        c.update_cluster_software(ClusterName="v", ImageId="ami-0123456789abcdef0")
    assert "not found" in e.value.response["Error"]["Message"]
    with pytest.raises(c.exceptions.ResourceNotFound):
        c.update_cluster_software(ClusterName="missing")


def test_scheduled_update_fires_once(srv):
    from datetime import UTC, datetime

    c = srv.client()
    groups = seed_groups(2)
    with pytest.raises(c.exceptions.ClientError) as e:
        bad = [dict(g) for g in groups]
        bad[1]["ScheduledUpdateConfig"] = {"ScheduleExpression": "cron(0 25 * * ? *)"}
        c.create_cluster(ClusterName="sched", InstanceGroups=bad)
    assert e.value.response["Error"]["Message"] == (
        "1 validation error detected: Invalid ScheduleExpression cron(0 25 * * ? *): "
        "Hours value 25 is out of range 0-23.") or "Hours value 25" in e.value.response["Error"]["Message"]
    when = datetime.fromtimestamp(time.time() + 4, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    groups[1]["ScheduledUpdateConfig"] = {"ScheduleExpression": f"at({when})", "DeploymentConfig": {
        "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "CAPACITY_PERCENTAGE", "Value": 50}}}}
    c.create_cluster(ClusterName="sched", InstanceGroups=groups)
    wait_status(c, "sched", {"InService"})
    new = _publish(srv)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        g = next(g for g in c.describe_cluster(ClusterName="sched")["InstanceGroups"]
                 if g["InstanceGroupName"] == "compute-group")
        if g.get("SoftwareUpdateStatus") == "Succeeded" and c.describe_cluster(
                ClusterName="sched")["ClusterStatus"] == "InService":
            break
        time.sleep(0.2)
    assert g.get("SoftwareUpdateStatus") == "Succeeded"
    assert g["ScheduledUpdateConfig"]["ScheduleExpression"] == f"at({when})"
    nodes = c.list_cluster_nodes(ClusterName="sched")["ClusterNodeSummaries"]
    assert all(c.describe_cluster_node(ClusterName="sched", NodeId=n["InstanceId"])["NodeDetails"]["CurrentImageId"]
               == new for n in nodes if n["InstanceGroupName"] == "compute-group")
    texts = _events(c, "sched")
    assert sum("has been scheduled for UpdateClusterSoftware to latest." in t for t in texts) == 1
    time.sleep(1.5)  # a one-time schedule never fires again
    assert sum("has been scheduled for UpdateClusterSoftware" in t for t in _events(c, "sched")) == 1


def test_marked_release_shows_security_update_required_then_end_of_life(srv):
    c = srv.client()
    c.create_cluster(ClusterName="mk", InstanceGroups=seed_groups(1))
    wait_status(c, "mk", {"InService"})
    catalog = ImageCatalog(srv.server.store)
    old = catalog.latest().image_id
    _publish(srv)  # a newer release: the running nodes are behind

    def statuses() -> set[str]:
        nodes = c.list_cluster_nodes(ClusterName="mk")["ClusterNodeSummaries"]
        groups = c.describe_cluster(ClusterName="mk")["InstanceGroups"]
        return {n["ImageVersionStatus"] for n in nodes} | {g["ImageVersionStatus"] for g in groups
                                                          if "ImageVersionStatus" in g}

    assert statuses() == {"UpdateAvailable"}
    catalog.mark(old, "SecurityUpdateRequired")
    assert statuses() == {"SecurityUpdateRequired"}
    catalog.mark(old, "EndOfLife")
    assert statuses() == {"EndOfLife"}
