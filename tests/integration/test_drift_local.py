"""SlurmConfigStrategy on real Slurm: Managed detects drift and changes nothing; Merge keeps a hand-added
partition; Overwrite replaces manual partition edits. Lines with keys slurmpod does not own survive."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import ROLE, seed_groups, wait_status

pytestmark = pytest.mark.integration
NAME = "drifty"
MANUAL = "PartitionName=manual Nodes=ALL MaxTime=INFINITE State=UP"


def _partitions(state) -> set[str]:
    out = in_node(state, NAME, None, "sinfo", "-h", "-o", "%R").stdout.split()
    return set(out)


def _groups_with_extra() -> list[dict]:
    groups = seed_groups(1)
    groups.append({"InstanceGroupName": "extra-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                   "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["extra"]}})
    return groups


def _wait_partitions(state, wanted: set[str], absent: set[str] = frozenset()) -> set[str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = _partitions(state)
        if wanted <= parts and not (absent & parts):
            return parts
        time.sleep(0.3)
    raise AssertionError(f"partitions {parts}, wanted {wanted}, absent {absent}")


def test_strategies_on_real_slurm(local_server):
    state = local_server.state_dir
    c = local_server.client()
    c.create_cluster(ClusterName=NAME, InstanceGroups=seed_groups(1))
    d = wait_status(c, NAME, {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    assert d["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Managed"
    # the operator edits slurm.conf by hand on the controller: a manual partition and a user setting
    r = in_node(state, NAME, None, "bash", "-c",
                f"echo '{MANUAL}' >> /etc/slurm/slurm.conf && echo 'MessageTimeout=20' >> /etc/slurm/slurm.conf")
    assert r.returncode == 0, r.stderr

    # Managed: drift -> the update fails, is rolled back, nothing changes
    c.update_cluster(ClusterName=NAME, InstanceGroups=_groups_with_extra())
    d = wait_status(c, NAME, {"InService"}, timeout=120)
    assert d["FailureMessage"].startswith("Configuration drift detected."), d.get("FailureMessage")
    assert "partition manual is not defined by any instance group" in d["FailureMessage"]
    assert [g["InstanceGroupName"] for g in d["InstanceGroups"]] == ["controller-group", "compute-group"]
    nodes = c.list_cluster_nodes(ClusterName=NAME)["ClusterNodeSummaries"]
    assert {n["InstanceGroupName"] for n in nodes} == {"controller-group", "compute-group"}
    conf = in_node(state, NAME, None, "cat", "/etc/slurm/slurm.conf").stdout
    assert MANUAL in conf and "extra" not in conf
    events = [e["Description"] for e in c.list_cluster_events(ClusterName=NAME, MaxResults=100)["Events"]]
    assert any(e.startswith("Slurm configuration drift detected: partition manual") for e in events)

    # Merge: the hand-added partition is kept and the API's partition is added
    c.update_cluster(ClusterName=NAME, InstanceGroups=_groups_with_extra(),
                     Orchestrator={"Slurm": {"SlurmConfigStrategy": "Merge"}})
    d = wait_status(c, NAME, {"InService"}, timeout=120)
    assert d.get("FailureMessage") is None
    _wait_partitions(state, {"dev", "compute", "extra", "manual"})
    conf = in_node(state, NAME, None, "cat", "/etc/slurm/slurm.conf").stdout
    assert "MessageTimeout=20" in conf

    # Overwrite: the API definition replaces manual partition edits; user settings stay
    c.update_cluster(ClusterName=NAME, InstanceGroups=_groups_with_extra(),
                     Orchestrator={"Slurm": {"SlurmConfigStrategy": "Overwrite"}})
    d = wait_status(c, NAME, {"InService"}, timeout=120)
    assert d["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Overwrite"
    _wait_partitions(state, {"dev", "compute", "extra"}, absent={"manual"})
    conf = in_node(state, NAME, None, "cat", "/etc/slurm/slurm.conf").stdout
    assert "MessageTimeout=20" in conf and "PartitionName=manual" not in conf
