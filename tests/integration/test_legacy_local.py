"""Legacy topology from provisioning_parameters.json on real Slurm, the both-at-once error, and migrate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import ROLE, wait_status

pytestmark = pytest.mark.integration


def _source(tmp_path, pp: dict | None):
    src = tmp_path / "lcc"
    src.mkdir()
    (src / "on_create.sh").write_text("#!/bin/bash\necho hello from $(hostname)\n")
    if pp is not None:
        (src / "provisioning_parameters.json").write_text(json.dumps(pp))
    return f"file://{src}"


def _group(name: str, count: int, uri: str, slurm: dict | None = None) -> dict:
    g = {"InstanceGroupName": name, "InstanceType": "ml.t3.medium", "InstanceCount": count, "ExecutionRole": ROLE,
         "LifeCycleConfig": {"SourceS3Uri": uri, "OnCreate": "on_create.sh"}}
    if slurm:
        g["SlurmConfig"] = slurm
    return g


def test_legacy_cluster_runs_and_migrates(local_server, tmp_path):
    state = local_server.state_dir
    c = local_server.client()
    pp = {"version": "1.0.0", "workload_manager": "slurm", "controller_group": "controller-machine",
          "worker_groups": [{"instance_group_name": "compute-nodes", "partition_name": "batch"}]}
    uri = _source(tmp_path, pp)
    c.create_cluster(ClusterName="legacy", InstanceGroups=[_group("controller-machine", 1, uri),
                                                          _group("compute-nodes", 2, uri)])
    d = wait_status(c, "legacy", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    assert all("SlurmConfig" not in g for g in d["InstanceGroups"])  # still shown as legacy
    out = in_node(state, "legacy", None, "sinfo", "-h", "-o", "%R %D %t").stdout
    assert "batch 2 idle" in out and "dev 2 idle" in out, out

    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "migrate", "legacy", "--state-dir", str(state)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = c.describe_cluster(ClusterName="legacy")
    roles = {g["InstanceGroupName"]: g["SlurmConfig"] for g in d["InstanceGroups"]}
    assert roles == {"controller-machine": {"NodeType": "Controller"},
                     "compute-nodes": {"NodeType": "Compute", "PartitionNames": ["batch"]}}
    assert d["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Managed"


def test_slurmconfig_and_provisioning_parameters_together_rejected(local_server, tmp_path):
    c = local_server.client()
    uri = _source(tmp_path, {"controller_group": "controller-group", "worker_groups": []})
    with pytest.raises(c.exceptions.ClientError) as e:
        c.create_cluster(ClusterName="both", InstanceGroups=[
            _group("controller-group", 1, uri, {"NodeType": "Controller"}),
            _group("compute-group", 1, uri, {"NodeType": "Compute", "PartitionNames": ["compute"]})])
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert e.value.response["Error"]["Message"] == (
        "The LifeCycleConfig cannot include both a SLURM Orchestrator Config and a provisioning_parameters.json "
        "file simultaneously.")
    assert c.list_clusters()["ClusterSummaries"] == []


def test_legacy_without_topology_file_rejected(local_server, tmp_path):
    c = local_server.client()
    uri = _source(tmp_path, None)
    with pytest.raises(c.exceptions.ClientError) as e:
        c.create_cluster(ClusterName="notopo", InstanceGroups=[_group("a", 1, uri), _group("b", 1, uri)])
    assert "provisioning_parameters.json" in e.value.response["Error"]["Message"]
