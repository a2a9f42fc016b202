"""Kill -9 the server during CreateCluster and UpdateCluster; the restarted server converges and never
launches an instance twice (the simulated provider's journal counts launches per instance id)."""

from __future__ import annotations

import random
import time
from pathlib import Path

from slurmpod.providers.simulated import SimulatedProvider
from slurmpod.store import SqlStore
from tests.serverproc import ROLE, ServerProcess, free_port, seed_groups, wait_status


def _assert_no_double_launch(state: Path) -> None:
    prov = SimulatedProvider(state)
    doubled = {i: n for i, n in prov.launch_counts.items() if n > 1}
    assert not doubled, f"instances launched more than once: {doubled}"


def _restart(srv: ServerProcess) -> None:
    srv.kill9()
    srv.start()


def test_kill9_during_create_and_update_converges(tmp_path: Path) -> None:
    state = tmp_path / "state"
    rng = random.Random(7)
    srv = ServerProcess(state, free_port(), "--provider", "simulated", "--simulated-launch-delay", "0.15")
    srv.start()
    try:
        c = srv.client()
        c.create_cluster(ClusterName="crashy", InstanceGroups=seed_groups(6))
        for _ in range(3):  # kill at random points while it is Creating
            time.sleep(rng.uniform(0.05, 0.4))
            _restart(srv)
            c = srv.client()
        d = wait_status(c, "crashy", {"InService", "Failed"}, timeout=60)
        assert d["ClusterStatus"] == "InService"
        assert [g["CurrentCount"] for g in d["InstanceGroups"]] == [1, 6]
        ids_before = {n["InstanceId"] for n in c.list_cluster_nodes(ClusterName="crashy")["ClusterNodeSummaries"]}

        groups = seed_groups(6)
        groups[1]["InstanceCount"] = 3
        groups.append({"InstanceGroupName": "extra-group", "InstanceType": "ml.t3.medium", "InstanceCount": 4,
                       "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["extra"]}})
        c.update_cluster(ClusterName="crashy", InstanceGroups=groups)
        for _ in range(3):  # kill at random points while it is Updating
            time.sleep(rng.uniform(0.05, 0.4))
            _restart(srv)
            c = srv.client()
        d = wait_status(c, "crashy", {"InService"}, timeout=60)
        assert [g["CurrentCount"] for g in d["InstanceGroups"]] == [1, 3, 4]
        nodes = c.list_cluster_nodes(ClusterName="crashy")["ClusterNodeSummaries"]
        assert len(nodes) == 8
        assert all(n["InstanceStatus"]["Status"] == "Running" for n in nodes)
        kept = {n["InstanceId"] for n in nodes if n["InstanceGroupName"] != "extra-group"}
        assert kept <= ids_before  # scale-down removed nodes; it did not replace the survivors
        c.delete_cluster(ClusterName="crashy")
        time.sleep(0.1)
        _restart(srv)
        c = srv.client()
        wait_status(c, "crashy", {"gone"}, timeout=60)
    finally:
        srv.stop()
    _assert_no_double_launch(state)
    assert SimulatedProvider(state).instances == {}
    store = SqlStore(f"sqlite:///{state / 'slurmpod.db'}")
    try:
        assert store.integrity_check() == []
    finally:
        store.close()
