"""Node operations on real Slurm: reboot, replace, delete, Slurm's Action:Replace idiom, NodeRecovery, and a
software update whose new release fails (rolled back)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import seed_groups, wait_status

pytestmark = pytest.mark.integration


def _nodes(c, name):
    return {n["InstanceId"]: n for n in c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]}


def _wait_running(c, name, count, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = _nodes(c, name)
        if len(nodes) == count and all(n["InstanceStatus"]["Status"] == "Running" for n in nodes.values()):
            return nodes
        time.sleep(0.2)
    raise AssertionError(f"nodes never all Running: {nodes}")


def _idle_count(state, name) -> int:
    out = in_node(state, name, None, "sinfo", "-h", "-p", "compute", "-o", "%D %t").stdout.split()
    return int(out[0]) if len(out) == 2 and out[1] == "idle" else -1


def _wait_idle(state, name, count, timeout=60):
    deadline = time.monotonic() + timeout
    while _idle_count(state, name) != count:
        assert time.monotonic() < deadline, in_node(state, name, None, "sinfo").stdout
        time.sleep(0.3)


def test_reboot_replace_delete_and_action_replace(local_server):
    state = local_server.state_dir
    c = local_server.client()
    c.create_cluster(ClusterName="ops", InstanceGroups=seed_groups(3))
    d = wait_status(c, "ops", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    nodes = _nodes(c, "ops")
    compute = sorted((i for i, n in nodes.items() if n["InstanceGroupName"] == "compute-group"),
                     key=lambda i: nodes[i]["PrivateDnsHostname"])

    # reboot: same instance, same hostname, rejoins
    r = c.batch_reboot_cluster_nodes(ClusterName="ops", NodeIds=[compute[0]])
    assert r["Successful"] == [compute[0]]
    after = _wait_running(c, "ops", 4)
    assert after.keys() == nodes.keys()
    _wait_idle(state, "ops", 3)

    # Slurm's own idiom: the node is replaced (new instance, fresh root volume) and re-registers under the same name
    host = nodes[compute[1]]["PrivateDnsHostname"]
    assert in_node(state, "ops", None, "bash", "-c", f"srun -w {host} touch /root/before-refresh").returncode == 0
    r = in_node(state, "ops", None, "scontrol", "update", f"nodename={host}", "state=fail", "reason=Action:Replace")
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        texts = [e["Description"] for e in c.list_cluster_events(ClusterName="ops", MaxResults=100)["Events"]]
        if any("(Action:Replace)" in t for t in texts):
            break
        time.sleep(0.3)
    deadline = time.monotonic() + 90
    while compute[1] in _nodes(c, "ops") and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _wait_running(c, "ops", 4)
    assert compute[1] not in after  # a new InstanceId ...
    assert host in {n["PrivateDnsHostname"] for n in after.values()}  # ... under the same hostname
    _wait_idle(state, "ops", 3)
    r = in_node(state, "ops", None, "bash", "-c", f"srun -w {host} test -e /root/before-refresh")
    assert r.returncode != 0  # the root volume is fresh

    # replace: a new instance in the same group, under the same hostname
    r = c.batch_replace_cluster_nodes(ClusterName="ops", NodeIds=[compute[2]])
    assert r["Successful"] == [compute[2]]
    deadline = time.monotonic() + 90
    while compute[2] in _nodes(c, "ops") and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _wait_running(c, "ops", 4)
    assert compute[2] not in after
    assert nodes[compute[2]]["PrivateDnsHostname"] in {n["PrivateDnsHostname"] for n in after.values()}
    _wait_idle(state, "ops", 3)

    # delete: drained, removed from Slurm, the group shrinks
    r = c.batch_delete_cluster_nodes(ClusterName="ops", NodeIds=[compute[0]])
    assert r["Successful"] == [compute[0]]
    deadline = time.monotonic() + 60
    while compute[0] in _nodes(c, "ops") and time.monotonic() < deadline:
        time.sleep(0.2)
    _wait_idle(state, "ops", 2)
    g = next(g for g in c.describe_cluster(ClusterName="ops")["InstanceGroups"]
             if g["InstanceGroupName"] == "compute-group")
    assert g["TargetCount"] == 2


def test_node_recovery_replaces_dead_node(local_server):
    state = local_server.state_dir
    c = local_server.client()
    c.create_cluster(ClusterName="heal", InstanceGroups=seed_groups(1))
    d = wait_status(c, "heal", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    cluster_id = d["ClusterArn"].rsplit("/", 1)[1]
    victim = next(i for i, n in _nodes(c, "heal").items() if n["InstanceGroupName"] == "compute-group")
    meta = json.loads(next(state.glob(f"local/**/{victim}/meta.json")).read_text())
    os.kill(meta["holder_pid"], signal.SIGKILL)  # every process of the node dies
    t0 = time.monotonic()
    deadline = t0 + 30
    while True:
        texts = [e["Description"] for e in c.list_cluster_events(ClusterName="heal", MaxResults=100)["Events"]]
        if any(victim in t and "NodeRecovery Automatic" in t for t in texts):
            break
        assert time.monotonic() < deadline, "the dead node was not noticed"
        time.sleep(0.2)
    _wait_running(c, "heal", 2, timeout=30)
    def rejoined() -> bool:
        slurmd = in_node(state, "heal", "compute-group", "pgrep", "-x", "slurmd").returncode == 0
        return slurmd and _idle_count(state, "heal") == 1

    while not rejoined():
        assert time.monotonic() < deadline, "the node did not rejoin Slurm within 30 s"
        time.sleep(0.3)
    assert cluster_id


def test_failed_release_rolls_back(local_server, tmp_path):
    state = local_server.state_dir
    c = local_server.client()
    c.create_cluster(ClusterName="bad", InstanceGroups=seed_groups(2))
    d = wait_status(c, "bad", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    script = tmp_path / "broken.sh"
    script.write_text("echo 'this release is broken' >&2\nexit 3\n")
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(state), "publish",
                        "--script", str(script)], capture_output=True, text=True, timeout=60)
    new = r.stdout.split()[1]
    c.update_cluster_software(ClusterName="bad", ImageId=new, InstanceGroups=[{"InstanceGroupName": "compute-group"}])
    d = wait_status(c, "bad", {"InService"}, timeout=240)
    g = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "compute-group")
    assert g["SoftwareUpdateStatus"] == "RollbackComplete", d
    assert "exit code 3" in d["FailureMessage"]
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName="bad", MaxResults=100)["Events"]]
    assert any("failed to update. Rollback initiated." in t for t in texts)
    assert any("rolled back successfully to previous AMI." in t for t in texts)
    _wait_running(c, "bad", 3)
    for iid in _nodes(c, "bad"):
        assert c.describe_cluster_node(ClusterName="bad", NodeId=iid)["NodeDetails"]["CurrentImageId"] != new
    _wait_idle(state, "bad", 2)
