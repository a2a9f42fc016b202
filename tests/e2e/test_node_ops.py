"""BatchRebootClusterNodes, BatchReplaceClusterNodes and NodeRecovery on the simulated provider."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurmpod.settings import Settings
from tests.serverproc import free_port, seed_groups, thread_server, wait_status


@pytest.fixture
def srv(tmp_path: Path):
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.02)
    with thread_server(settings) as s:
        s.server.reconciler.health_interval = 0.2
        yield s


def _nodes(c, name):
    return {n["InstanceId"]: n for n in c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]}


def _wait_all_running(c, name, count, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = _nodes(c, name)
        if len(nodes) == count and all(n["InstanceStatus"]["Status"] == "Running" for n in nodes.values()):
            return nodes
        time.sleep(0.1)
    raise AssertionError(f"not all running: {nodes}")


def test_reboot_and_replace(srv):
    c = srv.client()
    c.create_cluster(ClusterName="ops", InstanceGroups=seed_groups(2))
    wait_status(c, "ops", {"InService"})
    nodes = _nodes(c, "ops")
    ctl = next(i for i, n in nodes.items() if n["InstanceGroupName"] == "controller-group")
    compute = sorted(i for i, n in nodes.items() if n["InstanceGroupName"] == "compute-group")

    r = c.batch_reboot_cluster_nodes(ClusterName="ops", NodeIds=[compute[0], "i-0123456789abcdef0"])
    assert r["Successful"] == [compute[0]]
    assert r["Failed"][0]["NodeId"] == "i-0123456789abcdef0" and r["Failed"][0]["ErrorCode"] == "InstanceIdNotFound"
    after = _wait_all_running(c, "ops", 3)
    assert after.keys() == nodes.keys()  # same instance

    r = c.batch_replace_cluster_nodes(ClusterName="ops", NodeIds=[compute[1], ctl])
    assert r["Successful"] == [compute[1]]
    assert r["Failed"][0]["ErrorCode"] == "InstanceIdInUse"  # the only controller
    deadline = time.monotonic() + 20
    while compute[1] in _nodes(c, "ops") and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _wait_all_running(c, "ops", 3)
    assert compute[1] not in after and compute[0] in after
    new = [i for i, n in after.items() if i not in nodes]
    assert len(new) == 1 and after[new[0]]["InstanceGroupName"] == "compute-group"
    with pytest.raises(c.exceptions.ClientError):
        c.batch_reboot_cluster_nodes(ClusterName="ops", NodeIds=["i-" + "0" * 17] * 26)  # > 25 ids


def test_node_recovery_automatic_reboots_dead_instance(srv):
    c = srv.client()
    c.create_cluster(ClusterName="heal", InstanceGroups=seed_groups(1))
    wait_status(c, "heal", {"InService"})
    nodes = _nodes(c, "heal")
    victim = next(i for i, n in nodes.items() if n["InstanceGroupName"] == "compute-group")
    srv.server.runtime.provider.kill(victim)
    deadline = time.monotonic() + 20
    texts: list[str] = []
    while time.monotonic() < deadline:
        texts = [e["Description"] for e in c.list_cluster_events(ClusterName="heal", MaxResults=100)["Events"]]
        if any("NodeRecovery Automatic is rebooting it" in t for t in texts):
            break
        time.sleep(0.1)
    assert any(victim in t and "NodeRecovery Automatic" in t for t in texts)
    _wait_all_running(c, "heal", 2)
    assert srv.server.runtime.provider.instances[victim].alive


def test_node_recovery_none_leaves_failure(srv):
    c = srv.client()
    c.create_cluster(ClusterName="manual", InstanceGroups=seed_groups(1), NodeRecovery="None")
    wait_status(c, "manual", {"InService"})
    victim = next(i for i, n in _nodes(c, "manual").items() if n["InstanceGroupName"] == "compute-group")
    srv.server.runtime.provider.kill(victim)
    deadline = time.monotonic() + 20
    while _nodes(c, "manual")[victim]["InstanceStatus"]["Status"] != "Failure":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    g = next(g for g in c.describe_cluster(ClusterName="manual")["InstanceGroups"]
             if g["InstanceGroupName"] == "compute-group")
    assert g["Status"] == "Degraded"


def test_replacing_every_controller_goes_one_at_a_time(srv):
    c = srv.client()
    groups = seed_groups(1)
    groups[0]["InstanceCount"] = 2
    c.create_cluster(ClusterName="ctl", InstanceGroups=groups)
    wait_status(c, "ctl", {"InService"})
    old = {i for i, n in _nodes(c, "ctl").items() if n["InstanceGroupName"] == "controller-group"}
    out = c.batch_replace_cluster_nodes(ClusterName="ctl", NodeIds=sorted(old))
    assert sorted(out["Successful"]) == sorted(old) and not out.get("Failed")
    # a queued controller is busy for other node operations
    queued = [i for i in old if i in {e.get("InstanceId") for e in
                                      c.list_cluster_events(ClusterName="ctl", MaxResults=100)["Events"]
                                      if "is queued" in e["Description"]}]
    assert len(queued) == 1
    again = c.batch_reboot_cluster_nodes(ClusterName="ctl", NodeIds=queued)
    assert again["Failed"][0]["ErrorCode"] in ("InstanceIdInUse", "InvalidInstanceStatus"), again
    seen_running: list[int] = []
    deadline = time.monotonic() + 30
    while True:
        nodes = _nodes(c, "ctl")
        ctl = {i: n for i, n in nodes.items() if n["InstanceGroupName"] == "controller-group"}
        seen_running.append(sum(n["InstanceStatus"]["Status"] == "Running" for n in ctl.values()))
        if not (old & set(ctl)) and len(ctl) == 2 and all(n["InstanceStatus"]["Status"] == "Running"
                                                          for n in ctl.values()):
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(0.02)
    assert min(seen_running) >= 1, seen_running  # a controller always ran
