"""Seed 000 with the real AWS CLI: create-cluster, describe-cluster --query, update-cluster.

The JSON files are the seed's ``scripts/create_cluster.json`` and ``scripts/update_cluster.json`` with the
shell variables filled in. The simulated provider does not fetch lifecycle sources, so the seed's
``s3://sagemaker-.../base-config/`` URI is accepted as is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpod.settings import Settings
from tests.serverproc import RunningServer, boto_client, free_port, thread_server

REGION = "ap-northeast-1"
EXECUTION_ROLE_ARN = "arn:aws:iam::123456789012:role/hyperpod-api-driven-exec-role"
SUBNET_ID = "subnet-0123456789abcdef0"
SECURITY_GROUP_ID = "sg-0123456789abcdef0"
S3_BUCKET_NAME = "sagemaker-hyperpod-api-driven-lcc-b466065b"
CLUSTER = "hyperpod-api-driven-cluster"
QUERY = ("{Status: ClusterStatus, Strategy: Orchestrator.Slurm.SlurmConfigStrategy, Groups: InstanceGroups[*]."
         "{Name: InstanceGroupName, Type: SlurmConfig.NodeType, Partitions: SlurmConfig.PartitionNames}}")


def _group(name: str, node_type: str, count: int, partition: str | None = None) -> dict[str, Any]:
    slurm: dict[str, Any] = {"NodeType": node_type}
    if partition is not None:
        slurm["PartitionNames"] = [partition]
    return {
        "InstanceGroupName": name,
        "InstanceType": "ml.t3.medium",
        "InstanceCount": count,
        "ThreadsPerCore": 1,
        "ExecutionRole": EXECUTION_ROLE_ARN,
        "SlurmConfig": slurm,
        "LifeCycleConfig": {"SourceS3Uri": f"s3://{S3_BUCKET_NAME}/base-config/", "OnCreate": "on_create.sh"},
    }


CREATE_JSON: dict[str, Any] = {
    "ClusterName": CLUSTER,
    "InstanceGroups": [_group("controller-group", "Controller", 1), _group("compute-group", "Compute", 2, "compute")],
    "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}},
    "VpcConfig": {"SecurityGroupIds": [SECURITY_GROUP_ID], "Subnets": [SUBNET_ID]},
    "Tags": [
        {"Key": "Project", "Value": "hyperpod-api-driven-blog"},
        {"Key": "ManagedBy", "Value": "manual"},
    ],
}
UPDATE_JSON: dict[str, Any] = {
    "ClusterName": CLUSTER,
    "InstanceGroups": [
        _group("controller-group", "Controller", 1),
        _group("compute-group", "Compute", 2, "compute"),
        _group("extra-group", "Compute", 1, "extra"),
    ],
}
SEED_DESCRIBE = {
    "Status": "InService",
    "Strategy": "Managed",
    "Groups": [
        {"Name": "controller-group", "Type": "Controller", "Partitions": None},
        {"Name": "compute-group", "Type": "Compute", "Partitions": ["compute"]},
    ],
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated", region=REGION,
                        reconcile_interval=0.1, simulated_launch_delay=0.01)
    with thread_server(settings) as srv:
        yield srv


def _aws(srv: RunningServer, tmp_path: Path, *args: str) -> Any:
    assert srv.credential is not None  # the key `slurmpod credentials create` would print for this state dir
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": srv.credential.access_key_id,
        "AWS_SECRET_ACCESS_KEY": srv.credential.secret_access_key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
        "AWS_PAGER": "",
    }
    env.pop("AWS_PROFILE", None)
    argv = [sys.executable, "-m", "awscli", "sagemaker", *args, "--region", REGION, "--endpoint-url", srv.endpoint]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, f"{args[0]} failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout)


def _wait_in_service(srv: RunningServer, groups: int, timeout: float = 30.0) -> None:
    client = boto_client(srv.endpoint, credential=srv.credential, region=REGION)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = client.describe_cluster(ClusterName=CLUSTER)
        if d["ClusterStatus"] == "InService" and len(d["InstanceGroups"]) == groups and all(
            g["CurrentCount"] == g["TargetCount"] for g in d["InstanceGroups"]
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{CLUSTER} did not become InService with {groups} groups")


def test_seed000_with_aws_cli(server: RunningServer, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "create_cluster.json").write_text(json.dumps(CREATE_JSON, indent=4))
    (scripts / "update_cluster.json").write_text(json.dumps(UPDATE_JSON, indent=4))

    created = _aws(server, tmp_path, "create-cluster", "--cli-input-json", "file://scripts/create_cluster.json")
    assert set(created) == {"ClusterArn"}
    assert re.fullmatch(r"arn:aws:sagemaker:ap-northeast-1:123456789012:cluster/[a-z0-9]{12}", created["ClusterArn"])

    _wait_in_service(server, 2)
    described = _aws(server, tmp_path, "describe-cluster", "--cluster-name", CLUSTER, "--query", QUERY)
    assert described == SEED_DESCRIBE

    updated = _aws(server, tmp_path, "update-cluster", "--cli-input-json", "file://scripts/update_cluster.json")
    assert updated == {"ClusterArn": created["ClusterArn"]}

    _wait_in_service(server, 3)
    described = _aws(server, tmp_path, "describe-cluster", "--cluster-name", CLUSTER, "--query", QUERY)
    assert described == {
        **SEED_DESCRIBE,
        "Groups": [*SEED_DESCRIBE["Groups"], {"Name": "extra-group", "Type": "Compute", "Partitions": ["extra"]}],
    }

    nodes = _aws(server, tmp_path, "list-cluster-nodes", "--cluster-name", CLUSTER)["ClusterNodeSummaries"]
    assert sorted(n["InstanceGroupName"] for n in nodes) == [
        "compute-group", "compute-group", "controller-group", "extra-group"]
