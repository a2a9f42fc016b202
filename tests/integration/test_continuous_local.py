"""Continuous provisioning on real Slurm: partial capacity, then released capacity joins by itself."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import ROLE, ServerProcess, free_port, wait_status

pytestmark = pytest.mark.integration


@pytest.fixture
def cont_local(local_state):
    srv = ServerProcess(local_state, free_port(), "--provider", "local", "--capacity", "ml.c5.xlarge=1",
                        "--retry-delay", "0.5")
    srv.start()
    try:
        yield srv
    finally:
        from tests.integration.conftest import _delete_all

        _delete_all(srv)
        srv.stop()


def _compute(c):
    return next(g for g in c.describe_cluster(ClusterName="cont")["InstanceGroups"]
                if g["InstanceGroupName"] == "compute-group")


def test_continuous_capacity_story_on_real_slurm(cont_local):
    state = cont_local.state_dir
    c = cont_local.client()
    c.create_cluster(ClusterName="cont", NodeProvisioningMode="Continuous", InstanceGroups=[
        {"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute-group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 3,
         "MinInstanceCount": 2, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}}])
    wait_status(c, "cont", {"InService"}, timeout=120)
    deadline = time.monotonic() + 60
    while _compute(c)["CurrentCount"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    g = _compute(c)
    assert (g["Status"], g["CurrentCount"], g["TargetCount"], g["MinCount"]) == ("Creating", 1, 3, 2)
    info = in_node(state, "cont", None, "sinfo", "-h", "-o", "%P %D %t")
    assert "compute 1 idle" in info.stdout, info.stdout

    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "capacity", "--state-dir", str(state), "set",
                        "ml.c5.xlarge=3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        g = _compute(c)
        if g["Status"] == "InService" and g["CurrentCount"] == 3:
            break
        time.sleep(0.3)
    assert (g["Status"], g["CurrentCount"]) == ("InService", 3)
    deadline = time.monotonic() + 30
    while "compute 3 idle" not in (out := in_node(state, "cont", None, "sinfo", "-h", "-o", "%P %D %t").stdout):
        assert time.monotonic() < deadline, out
        time.sleep(0.3)

    events = c.list_cluster_events(ClusterName="cont", SortOrder="Ascending", MaxResults=100)["Events"]
    texts = [e["Description"] for e in events]
    started = next(i for i, t in enumerate(texts) if t.startswith("Cluster cont creation started"))
    in_service = next(i for i, t in enumerate(texts) if t.startswith("Cluster cont creation completed"))
    retried = next(i for i, t in enumerate(texts) if "will be retried" in t)
    reached = next(i for i, t in enumerate(texts) if t.startswith("Minimum capacity reached for InstanceGroup compute"))
    assert started < in_service < reached and started < retried < reached, texts
    retry_event = events[retried]
    assert retry_event["ResourceType"] == "Instance"
