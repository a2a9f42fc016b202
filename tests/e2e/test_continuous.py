"""Continuous provisioning on the simulated provider: partial capacity, async retries, MinCount, rollback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurmpod.reconciler.loop import CAPACITY_KEY
from slurmpod.settings import Settings
from tests.serverproc import ROLE, free_port, thread_server, wait_status


def _groups(compute: int, minimum: int | None, itype: str = "ml.c5.xlarge") -> list[dict]:
    comp = {"InstanceGroupName": "compute-group", "InstanceType": itype, "InstanceCount": compute,
            "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}}
    if minimum is not None:
        comp["MinInstanceCount"] = minimum
    return [{"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
             "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}}, comp]


def _group(c, name: str, group: str) -> dict:
    return next(g for g in c.describe_cluster(ClusterName=name)["InstanceGroups"] if g["InstanceGroupName"] == group)


def _wait_group(c, name: str, group: str, status: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        g = _group(c, name, group)
        if g["Status"] == status:
            return g
        time.sleep(0.1)
    raise TimeoutError(f"group {group} never reached {status}: {g}")


def _descriptions(c, name: str) -> list[str]:
    resp = c.list_cluster_events(ClusterName=name, SortOrder="Ascending", MaxResults=100)
    return [e["Description"] for e in resp["Events"]]


@pytest.fixture
def cont_server(tmp_path: Path):
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.01, retry_delay=0.2, min_count_timeout=3.0,
                        capacity={"ml.c5.xlarge": 1})
    with thread_server(settings) as srv:
        yield srv


def test_continuous_partial_capacity_then_release(cont_server):
    c = cont_server.client()
    c.create_cluster(ClusterName="cont", InstanceGroups=_groups(3, 2), NodeProvisioningMode="Continuous")
    d = wait_status(c, "cont", {"InService"}, timeout=30)
    assert d["NodeProvisioningMode"] == "Continuous"
    g = _wait_group(c, "cont", "compute-group", "Creating")
    time.sleep(0.5)
    g = _group(c, "cont", "compute-group")
    assert (g["CurrentCount"], g["TargetCount"], g["MinCount"], g["Status"]) == (1, 3, 2, "Creating")
    # a group below MinCount blocks node deletion
    node = next(n for n in c.list_cluster_nodes(ClusterName="cont")["ClusterNodeSummaries"]
                if n["InstanceGroupName"] == "compute-group" and n["InstanceStatus"]["Status"] == "Running")
    with pytest.raises(c.exceptions.ConflictException):
        c.batch_delete_cluster_nodes(ClusterName="cont", NodeIds=[node["InstanceId"]])
    # release capacity: the pending instances join by themselves
    cont_server.server.store.put_setting(CAPACITY_KEY, {"ml.c5.xlarge": 10})
    g = _wait_group(c, "cont", "compute-group", "InService")
    deadline = time.monotonic() + 20
    while _group(c, "cont", "compute-group")["CurrentCount"] < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group(c, "cont", "compute-group")["CurrentCount"] == 3
    texts = _descriptions(c, "cont")
    capacity_fail = next(i for i, t in enumerate(texts) if "will be retried" in t)
    reached = next(i for i, t in enumerate(texts) if t.startswith("Minimum capacity reached for InstanceGroup compute"))
    assert capacity_fail < reached


def test_continuous_mincount_rollback(cont_server):
    c = cont_server.client()
    c.create_cluster(ClusterName="rb", InstanceGroups=_groups(3, 3), NodeProvisioningMode="Continuous")
    wait_status(c, "rb", {"InService"}, timeout=30)
    g = _wait_group(c, "rb", "compute-group", "InService", timeout=30)  # after the 3 s deadline: rolled back
    assert (g["TargetCount"], g["MinCount"]) == (0, 0)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        nodes = [n for n in c.list_cluster_nodes(ClusterName="rb")["ClusterNodeSummaries"]
                 if n["InstanceGroupName"] == "compute-group"]
        if not nodes:
            break
        time.sleep(0.1)
    assert nodes == []
    assert any(t.startswith("Rollback initiated for InstanceGroup compute-group") for t in _descriptions(c, "rb"))


def test_continuous_update_rolls_back_to_last_inservice_counts(cont_server):
    c = cont_server.client()
    c.create_cluster(ClusterName="up", InstanceGroups=_groups(1, 1), NodeProvisioningMode="Continuous")
    wait_status(c, "up", {"InService"}, timeout=30)
    _wait_group(c, "up", "compute-group", "InService")
    c.update_cluster(ClusterName="up", InstanceGroups=_groups(4, 3))  # capacity 1: MinCount 3 unreachable
    assert _group(c, "up", "compute-group")["Status"] == "Updating"
    g = _wait_group(c, "up", "compute-group", "InService", timeout=30)
    assert (g["TargetCount"], g["MinCount"]) == (1, 1)
    # overlapping scaling requests are accepted (the cluster stays InService)
    c.update_cluster(ClusterName="up", InstanceGroups=_groups(1, 0))
    c.update_cluster(ClusterName="up", InstanceGroups=_groups(1, 1))


def test_continuous_rejects_strategy_and_mincount_without_continuous(cont_server):
    c = cont_server.client()
    with pytest.raises(c.exceptions.ClientError) as e:
        c.create_cluster(ClusterName="bad", InstanceGroups=_groups(1, None), NodeProvisioningMode="Continuous",
                         Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})
    assert "ValidationException" in str(e.value)
    with pytest.raises(c.exceptions.ClientError) as e:
        c.create_cluster(ClusterName="bad", InstanceGroups=_groups(2, 1))
    assert "ValidationException" in str(e.value)
