"""Replacement keeps the node's name, on real Slurm (local provider): BatchReplaceClusterNodes and Slurm's
``Action:Replace`` give a compute node a new InstanceId with the same PrivatePrimaryIp, PrivateDnsHostname and
Slurm NodeName; its OnCreate script runs again on the new instance, the node is idle in sinfo and runs jobs.

The OnCreate script appends ``<hostname> <instance id>`` to a file on the shared /home, so the test reads every
run of it from any node."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import seed_groups, wait_status

pytestmark = pytest.mark.integration

CLUSTER = "keepname"
RUNS = "/home/oncreate-runs.txt"
ON_CREATE = f"""#!/bin/bash
set -eu
echo "$(hostname) ${{SLURMPOD_INSTANCE_ID}}" >> {RUNS}
"""


def _compute(c: Any) -> dict[str, dict[str, Any]]:
    nodes = c.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]
    return {n["InstanceId"]: n for n in nodes if n["InstanceGroupName"] == "compute-group"}


def _detail(c: Any, iid: str) -> dict[str, Any]:
    return c.describe_cluster_node(ClusterName=CLUSTER, NodeId=iid)["NodeDetails"]


def _wait_successor(c: Any, old: str, count: int, timeout: float = 120) -> str:
    """The instance that replaced ``old``, once the group is back to ``count`` Running nodes without it."""
    deadline = time.monotonic() + timeout
    nodes: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        nodes = _compute(c)
        if old not in nodes and len(nodes) == count and \
                all(n["InstanceStatus"]["Status"] == "Running" for n in nodes.values()):
            return next(i for i, n in nodes.items() if n["LaunchTime"] == max(x["LaunchTime"] for x in nodes.values()))
        time.sleep(0.3)
    raise AssertionError(f"{old} was not replaced: {nodes}")


def _slurm_state(state: Path, host: str) -> str:
    r = in_node(state, CLUSTER, None, "sinfo", "-h", "-n", host, "-o", "%N %t")
    return r.stdout.strip()


def _wait_idle(state: Path, host: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _slurm_state(state, host) != f"{host} idle":
        assert time.monotonic() < deadline, in_node(state, CLUSTER, None, "sinfo", "-N").stdout
        time.sleep(0.3)


def _check_same_name(c: Any, state: Path, old: str, before: dict[str, Any], new: str) -> None:
    after = _detail(c, new)
    assert new != old
    assert after["PrivatePrimaryIp"] == before["PrivatePrimaryIp"]
    assert after["PrivateDnsHostname"] == before["PrivateDnsHostname"]
    host = before["PrivateDnsHostname"]
    _wait_idle(state, host)  # the same Slurm NodeName, registered again by the new slurmd
    runs = in_node(state, CLUSTER, None, "cat", RUNS).stdout.splitlines()
    assert f"{host} {old}" in runs and f"{host} {new}" in runs, runs  # OnCreate ran again, on the new instance
    r = in_node(state, CLUSTER, None, "srun", "-w", host, "-N1", "hostname", timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == host, r.stderr
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName=CLUSTER, MaxResults=100)["Events"]]
    assert any(f"Instance {new} replaces Instance {old}" in t and host in t for t in texts), texts
    assert any(f"Instance {old} is starting as part of instance replacement" in t for t in texts), texts


def test_replaced_compute_node_keeps_hostname_ip_and_nodename(local_server: Any, tmp_path: Path) -> None:
    state = local_server.state_dir
    c = local_server.client()
    src = tmp_path / "lcc"
    src.mkdir()
    (src / "on_create.sh").write_text(ON_CREATE)
    groups = seed_groups(2)
    groups[1]["LifeCycleConfig"] = {"SourceS3Uri": f"file://{src}", "OnCreate": "on_create.sh"}
    c.create_cluster(ClusterName=CLUSTER, InstanceGroups=groups)
    d = wait_status(c, CLUSTER, {"InService", "Failed"}, timeout=180)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    first, second = sorted(_compute(c), key=lambda i: _compute(c)[i]["PrivateDnsHostname"])

    # BatchReplaceClusterNodes: a new instance under the same name
    before = _detail(c, first)
    r = c.batch_replace_cluster_nodes(ClusterName=CLUSTER, NodeIds=[first])
    assert r["Successful"] == [first]
    new = _wait_successor(c, first, 2)
    _check_same_name(c, state, first, before, new)

    # Slurm's idiom: the node set to FAIL with reason Action:Replace is replaced (NodeRecovery) the same way
    before = _detail(c, second)
    host = before["PrivateDnsHostname"]
    r = in_node(state, CLUSTER, None, "scontrol", "update", f"nodename={host}", "state=fail",
                "reason=Action:Replace")
    assert r.returncode == 0, r.stderr
    new2 = _wait_successor(c, second, 2)
    _check_same_name(c, state, second, before, new2)
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName=CLUSTER, MaxResults=100)["Events"]]
    assert any(second in t and "(Action:Replace)" in t for t in texts), texts
    # both nodes take a 2-node job
    r = in_node(state, CLUSTER, None, "srun", "-N2", "-p", "compute", "hostname", timeout=60)
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(
        [_detail(c, new)["PrivateDnsHostname"], host]), r.stderr
