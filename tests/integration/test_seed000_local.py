"""Seed 000 end to end on real Slurm: create -> InService -> sinfo/sbatch -> add a group -> delete -> clean."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import ROLE, seed_groups, wait_status

pytestmark = pytest.mark.integration


def _sinfo(state, cluster: str) -> dict[str, tuple[int, str, str]]:
    r = in_node(state, cluster, None, "sinfo", "-h", "-o", "%P %D %t %N")
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        part, count, st, nodes = line.split()
        out[part] = (int(count), st, nodes)
    return out


def test_seed000_on_real_slurm(local_server):
    state = local_server.state_dir
    c = local_server.client()
    t0 = time.monotonic()
    arn = c.create_cluster(ClusterName="hyperpod-api-driven-cluster", InstanceGroups=seed_groups(2),
                           Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})["ClusterArn"]
    d = wait_status(c, "hyperpod-api-driven-cluster", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    print(f"InService after {time.monotonic() - t0:.2f}s")
    name = "hyperpod-api-driven-cluster"
    nodes = c.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]
    compute = sorted(n["PrivateDnsHostname"] for n in nodes if n["InstanceGroupName"] == "compute-group")
    assert len(compute) == 2

    info = _sinfo(state, name)
    assert info["dev*"][0] == 2 and info["dev*"][1] == "idle"
    assert info["compute"][0] == 2 and info["compute"][1] == "idle"

    # a job on the compute partition runs on a compute node and completes
    r = in_node(state, name, None, "bash", "-c",
                "cd /home && sbatch --parsable --partition=compute --wrap='hostname && sleep 1'")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    deadline = time.monotonic() + 60
    out = ""
    while time.monotonic() < deadline:
        q = in_node(state, name, None, "squeue", "-h", "-j", job)
        res = in_node(state, name, None, "cat", f"/home/slurm-{job}.out")
        if not q.stdout.strip() and res.returncode == 0:
            out = res.stdout.strip()
            break
        time.sleep(0.3)
    assert out in compute, f"job output {out!r} not one of {compute}"

    # a job that runs across the topology change (slurmctld restarts gracefully; the job must survive)
    r = in_node(state, name, None, "bash", "-c", "cd /home && sbatch --parsable --partition=compute --wrap='sleep 8'")
    assert r.returncode == 0, r.stderr
    long_job = r.stdout.strip()
    deadline = time.monotonic() + 30
    while "JobState=RUNNING" not in in_node(state, name, None, "scontrol", "show", "job", long_job).stdout:
        assert time.monotonic() < deadline, "the long job never started"
        time.sleep(0.2)

    # UpdateCluster: add extra-group in partition extra
    groups = seed_groups(2)
    groups.append({"InstanceGroupName": "extra-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                   "ThreadsPerCore": 1, "ExecutionRole": ROLE,
                   "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["extra"]}})
    c.update_cluster(ClusterName=name, InstanceGroups=groups)
    d = wait_status(c, name, {"InService"}, timeout=120)
    assert d.get("FailureMessage") is None
    nodes = c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
    extra = [n["PrivateDnsHostname"] for n in nodes if n["InstanceGroupName"] == "extra-group"]
    assert len(extra) == 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = _sinfo(state, name)
        if info.get("extra", (0,))[0] == 1 and info["dev*"][0] == 3 and info["dev*"][1] == "idle":
            break
        time.sleep(0.3)
    assert info["extra"] == (1, "idle", extra[0])
    assert info["dev*"][0] == 3
    assert info["compute"][0] == 2
    show = in_node(state, name, None, "scontrol", "show", "job", long_job).stdout
    assert ("JobState=RUNNING" in show or "JobState=COMPLETED" in show) and "Restarts=0" in show, show

    # delete: nothing of the cluster remains
    cluster_id = arn.rsplit("/", 1)[1]
    c.delete_cluster(ClusterName=name)
    wait_status(c, name, {"gone"}, timeout=120)
    from slurmpod.providers.local.cleanup import find_leftovers

    assert find_leftovers(state) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert cluster_id not in netns
    assert cluster_id[:10] not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True,
                                                 timeout=10).stdout
    assert str(state) not in open("/proc/mounts").read()
    assert not list((state / "local").glob(f"**/{cluster_id}*"))
