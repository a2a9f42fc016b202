"""A cluster with a Login group: sinfo/sbatch work on the login node; the job runs on a compute node."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import ROLE, seed_groups, wait_status

pytestmark = pytest.mark.integration


def test_login_node_submits_jobs(local_server):
    state = local_server.state_dir
    c = local_server.client()
    groups = seed_groups(1)
    groups.insert(1, {"InstanceGroupName": "login-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                      "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Login"}})
    c.create_cluster(ClusterName="withlogin", InstanceGroups=groups)
    d = wait_status(c, "withlogin", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    r = in_node(state, "withlogin", "login-group", "sinfo", "-h", "-o", "%P %D %t")
    assert r.returncode == 0, r.stderr
    assert "dev* 1 idle" in r.stdout
    r = in_node(state, "withlogin", "login-group", "bash", "-c",
                "cd /home && sbatch --parsable --partition=compute --wrap=hostname")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    compute = [n["PrivateDnsHostname"] for n in c.list_cluster_nodes(ClusterName="withlogin")["ClusterNodeSummaries"]
               if n["InstanceGroupName"] == "compute-group"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = in_node(state, "withlogin", "login-group", "cat", f"/home/slurm-{job}.out")
        if out.returncode == 0 and out.stdout.strip():
            break
        time.sleep(0.3)
    assert out.stdout.strip() == compute[0]
