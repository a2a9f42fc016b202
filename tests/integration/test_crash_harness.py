"""Crash safety on real nodes: SIGKILL the server at >= 20 random points during create, update, software
update and delete. After each restart every operation converges, no instance is launched twice, nothing
leaks (`slurmpod cleanup --check`), and the database passes an integrity check."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmpod.store import SqlStore
from tests.serverproc import ROLE, ServerProcess, free_port, seed_groups, wait_status

pytestmark = pytest.mark.integration
NAME = "crashy"


def _restart(srv: ServerProcess) -> None:
    srv.kill9()
    for _ in range(3):
        try:
            srv.start()
            srv.client().list_clusters()
            return
        except Exception:
            time.sleep(0.3)
    srv.start()


def _chaos(srv: ServerProcess, kills: int, rng: random.Random, low: float, high: float) -> int:
    for _ in range(kills):
        time.sleep(rng.uniform(low, high))
        _restart(srv)
    return kills


def _instances(state: Path) -> dict[str, dict]:
    out = {}
    for meta in state.glob("local/clusters/*/instances/*/meta.json"):
        rec = json.loads(meta.read_text())
        if rec.get("group") != "accounting":  # the cluster's accounting host is not a node
            out[rec["instance_id"]] = rec
    return out


def _netns() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout.split()


def _check_consistent(srv: ServerProcess, expected: int) -> dict[str, dict]:
    nodes = srv.client().list_cluster_nodes(ClusterName=NAME)["ClusterNodeSummaries"]
    assert len(nodes) == expected and all(n["InstanceStatus"]["Status"] == "Running" for n in nodes), nodes
    inst = _instances(srv.state_dir)
    assert set(inst) == {n["InstanceId"] for n in nodes}, "provider instances differ from the API's nodes"
    mine = [ns for ns in _netns() if ns in {i["netns"] for i in inst.values()}]
    assert len(mine) == expected
    return inst


def test_sigkill_at_random_points(local_state):
    rng = random.Random(20261130)
    srv = ServerProcess(local_state, free_port(), "--provider", "local")
    srv.start()
    kills = 0
    try:
        c = srv.client()
        c.create_cluster(ClusterName=NAME, InstanceGroups=seed_groups(2))
        kills += _chaos(srv, 6, rng, 0.05, 0.5)
        d = wait_status(srv.client(), NAME, {"InService", "Failed"}, timeout=180)
        assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
        inst = _check_consistent(srv, 3)
        assert all(i["boots"] == 1 for i in inst.values()), "an instance was booted twice during create"

        groups = seed_groups(3)
        groups.append({"InstanceGroupName": "extra-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                       "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["extra"]}})
        srv.client().update_cluster(ClusterName=NAME, InstanceGroups=groups)
        kills += _chaos(srv, 6, rng, 0.05, 0.5)
        d = wait_status(srv.client(), NAME, {"InService"}, timeout=180)
        assert d.get("FailureMessage") is None, d.get("FailureMessage")
        inst = _check_consistent(srv, 5)
        assert all(i["boots"] == 1 for i in inst.values()), "an instance was booted twice during update"

        script = local_state / "release.sh"
        script.write_text("echo v2 > /etc/v2\n")
        out = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(local_state),
                              "publish", "--script", str(script)], capture_output=True, text=True, timeout=60)
        new = out.stdout.split()[1]
        srv.client().update_cluster_software(ClusterName=NAME, ImageId=new, DeploymentConfig={
            "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2}}})
        kills += _chaos(srv, 6, rng, 0.1, 0.8)
        d = wait_status(srv.client(), NAME, {"InService"}, timeout=300)
        assert d.get("FailureMessage") is None, d.get("FailureMessage")
        assert {g["SoftwareUpdateStatus"] for g in d["InstanceGroups"]} == {"Succeeded"}
        _check_consistent(srv, 5)
        for n in srv.client().list_cluster_nodes(ClusterName=NAME)["ClusterNodeSummaries"]:
            assert n["ImageVersionStatus"] == "UpToDate"

        srv.client().delete_cluster(ClusterName=NAME)
        kills += _chaos(srv, 4, rng, 0.02, 0.2)
        wait_status(srv.client(), NAME, {"gone"}, timeout=180)
    finally:
        srv.stop()
    assert kills >= 20
    check = subprocess.run([sys.executable, "-m", "slurmpod.cli", "cleanup", "--check", "--state-dir",
                            str(local_state)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout
    assert _instances(local_state) == {}
    store = SqlStore(f"sqlite:///{local_state / 'slurmpod.db'}")
    try:
        assert store.integrity_check() == []
    finally:
        store.close()
