"""BatchAddClusterNodes, ListClusterOperations / DescribeClusterOperation and the EKS-only operations through boto3
(simulated provider): NodeLogicalIds, ClientToken idempotency, per-group failures, AWS-style errors that change
nothing, and the operations every create, update, scaling and software update leaves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpod.settings import Settings
from tests.serverproc import RunningServer, free_port, rejected, seed_groups, thread_server, wait_status

CONT = "ops-cont"
PLAIN = "ops-plain"
UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    state = Path(tmp_path_factory.mktemp("ops")) / "state"
    settings = Settings(state_dir=state, port=free_port(), provider="simulated", reconcile_interval=0.05,
                        simulated_launch_delay=0.01)
    with thread_server(settings) as server:
        c = server.client()
        c.create_cluster(ClusterName=CONT, InstanceGroups=seed_groups(1), NodeProvisioningMode="Continuous")
        c.create_cluster(ClusterName=PLAIN, InstanceGroups=seed_groups(1))
        wait_status(c, CONT, {"InService"})
        wait_status(c, PLAIN, {"InService"})
        yield server


def _wait_running(c: Any, name: str, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    nodes: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        nodes = c.list_cluster_nodes(ClusterName=name, IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]
        if len(nodes) == count and all(n["InstanceStatus"]["Status"] == "Running" for n in nodes):
            return nodes
        time.sleep(0.05)
    raise AssertionError(f"not {count} running: {nodes}")


def _state(c: Any, name: str) -> Any:
    d = c.describe_cluster(ClusterName=name)
    d.pop("ResponseMetadata")
    return d


def _wait_ops_done(c: Any, name: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    ops: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        ops = c.list_cluster_operations(ClusterName=name)["ClusterOperationSummaries"]
        if all(o["Status"] != "InProgress" for o in ops):
            return ops
        time.sleep(0.05)
    raise AssertionError(f"operations still in progress: {ops}")


def test_batch_add_returns_logical_ids_and_nodes_join(srv: RunningServer) -> None:
    c = srv.client()
    r = c.batch_add_cluster_nodes(ClusterName=CONT, NodesToAdd=[
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 2},
        {"InstanceGroupName": "no-such-group", "IncrementTargetCountBy": 1},
        {"InstanceGroupName": "controller-group", "IncrementTargetCountBy": 1, "InstanceTypes": ["ml.c5.xlarge"]},
    ])
    ok = r["Successful"]
    assert len(ok) == 2 and {s["InstanceGroupName"] for s in ok} == {"compute-group"}
    assert all(s["Status"] == "Pending" for s in ok)
    codes = {f["InstanceGroupName"]: (f["ErrorCode"], f["FailedCount"]) for f in r["Failed"]}
    assert codes == {"no-such-group": ("InstanceGroupNotFound", 1),
                     "controller-group": ("IncompatibleInstanceTypes", 1)}
    nodes = _wait_running(c, CONT, 4)
    logical = {n["NodeLogicalId"] for n in nodes if n["InstanceGroupName"] == "compute-group"}
    assert {s["NodeLogicalId"] for s in ok} <= logical
    one = c.describe_cluster_node(ClusterName=CONT, NodeLogicalId=ok[0]["NodeLogicalId"])["NodeDetails"]
    assert one["InstanceGroupName"] == "compute-group" and one["InstanceStatus"]["Status"] == "Running"
    groups = {g["InstanceGroupName"]: g for g in c.describe_cluster(ClusterName=CONT)["InstanceGroups"]}
    assert groups["compute-group"]["TargetCount"] == 3


def test_client_token_is_idempotent(srv: RunningServer) -> None:
    c = srv.client()
    token = str(uuid.uuid4())
    add = [{"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1}]
    before = c.describe_cluster(ClusterName=CONT)
    target = {g["InstanceGroupName"]: g["TargetCount"] for g in before["InstanceGroups"]}["compute-group"]
    first = c.batch_add_cluster_nodes(ClusterName=CONT, NodesToAdd=add, ClientToken=token)
    again = c.batch_add_cluster_nodes(ClusterName=CONT, NodesToAdd=add, ClientToken=token)
    assert [s["NodeLogicalId"] for s in again["Successful"]] == [s["NodeLogicalId"] for s in first["Successful"]]
    groups = {g["InstanceGroupName"]: g for g in c.describe_cluster(ClusterName=CONT)["InstanceGroups"]}
    assert groups["compute-group"]["TargetCount"] == target + 1  # added once
    msg = rejected(c.batch_add_cluster_nodes, ClusterName=CONT, ClientToken=token,
                   NodesToAdd=[{"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 2}])
    assert "already used with different parameters" in msg
    _wait_running(c, CONT, target + 2)


def test_batch_add_errors_change_nothing(srv: RunningServer) -> None:
    c = srv.client()
    _wait_running(c, CONT, len(c.list_cluster_nodes(ClusterName=CONT)["ClusterNodeSummaries"]))
    before = _state(c, CONT), _state(c, PLAIN)
    msg = rejected(c.batch_add_cluster_nodes, ClusterName=PLAIN,
                   NodesToAdd=[{"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1}])
    assert msg == "BatchAddClusterNodes is only supported for cluster with NodeProvisioningMode set to Continuous"
    msg = rejected(c.batch_add_cluster_nodes, ClusterName=CONT, NodesToAdd=[
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 30},
        {"InstanceGroupName": "controller-group", "IncrementTargetCountBy": 21}])
    assert "at most 50 nodes" in msg
    msg = rejected(c.batch_add_cluster_nodes, ClusterName=CONT, NodesToAdd=[
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1},
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1}])
    assert "duplicate instance group names: compute-group" in msg
    raw = srv.raw("SageMaker.BatchAddClusterNodes", {"ClusterName": CONT, "NodesToAdd": [
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 51}]})
    assert raw.status_code == 400 and raw.json()["__type"] == "ValidationException"
    assert "incrementTargetCountBy" in raw.json()["message"]
    raw = srv.raw("SageMaker.BatchAddClusterNodes", {"ClusterName": CONT, "NodesToAdd": [
        {"InstanceGroupName": f"g{i}", "IncrementTargetCountBy": 1} for i in range(6)]})
    assert raw.status_code == 400 and "Member must have length less than or equal to 5" in raw.json()["message"]
    raw = srv.raw("SageMaker.BatchAddClusterNodes", {"ClusterName": "nope", "NodesToAdd": [
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1}]})
    assert raw.status_code == 400 and raw.json() == {"__type": "ResourceNotFound", "message": "Cluster nope not found."}
    r = c.batch_add_cluster_nodes(ClusterName=CONT, NodesToAdd=[
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1, "AvailabilityZones": ["us-east-1a"]}])
    assert r["Successful"] == [] and r["Failed"][0]["ErrorCode"] == "IncompatibleAvailabilityZones"
    assert (_state(c, CONT), _state(c, PLAIN)) == before


def test_operations_list_every_change(srv: RunningServer) -> None:
    c = srv.client()
    name = "ops-history"
    c.create_cluster(ClusterName=name, InstanceGroups=seed_groups(1))
    wait_status(c, name, {"InService"})
    c.update_cluster(ClusterName=name, InstanceGroups=seed_groups(2))
    wait_status(c, name, {"InService"})
    c.update_cluster_software(ClusterName=name)
    wait_status(c, name, {"InService"})
    ops = _wait_ops_done(c, name)
    assert len(ops) == 3 and all(o["Status"] == "Done" for o in ops)
    assert [o.get("Type") for o in ops] == [None, "Scaling", "Scaling"]  # newest first; software update untyped
    assert ops == sorted(ops, key=lambda o: o["CreationTime"], reverse=True)
    events = c.list_cluster_events(ClusterName=name)["Events"]
    assert {o["OperationId"] for o in ops} == {e["OperationId"] for e in events if e.get("OperationId")}
    scaling = c.list_cluster_operations(ClusterName=name, Type="Scaling", SortOrder="Ascending")
    create, update = scaling["ClusterOperationSummaries"]
    d = c.describe_cluster_operation(ClusterName=name, OperationId=update["OperationId"])
    assert d["Type"] == "Scaling" and d["Status"] == "Done" and d["ClusterArn"] == create["ClusterArn"]
    assert d["ScalingDetails"] == [{"InstanceGroupName": "compute-group", "Status": "Done",
                                    "Original": {"CurrentCount": 1, "TargetCount": 1, "MinCount": 1},
                                    "Desired": {"CurrentCount": 1, "TargetCount": 2, "MinCount": 2}}]
    d = c.describe_cluster_operation(ClusterName=name, OperationId=create["OperationId"])
    assert {s["InstanceGroupName"] for s in d["ScalingDetails"]} == {"controller-group", "compute-group"}
    assert all("Original" not in s for s in d["ScalingDetails"])
    page = c.list_cluster_operations(ClusterName=name, MaxResults=2)
    rest = c.list_cluster_operations(ClusterName=name, MaxResults=2, NextToken=page["NextToken"])
    assert [o["OperationId"] for o in page["ClusterOperationSummaries"] + rest["ClusterOperationSummaries"]] == \
        [o["OperationId"] for o in ops]
    assert c.list_cluster_operations(ClusterName=name, Status="InProgress")["ClusterOperationSummaries"] == []
    assert c.list_cluster_operations(ClusterName=name, Type="DeepHealthCheck")["ClusterOperationSummaries"] == []
    raw = srv.raw("SageMaker.DescribeClusterOperation",
                  {"ClusterName": name, "OperationId": "00000000-0000-4000-8000-000000000000"})
    assert raw.status_code == 400 and raw.json()["__type"] == "ResourceNotFound"
    raw = srv.raw("SageMaker.DescribeClusterOperation", {"ClusterName": name, "OperationId": "not-a-uuid"})
    assert raw.status_code == 400 and raw.json()["__type"] == "ValidationException"
    raw = srv.raw("SageMaker.ListClusterOperations", {"ClusterName": name, "Type": "Patching"})
    assert raw.status_code == 400 and "Member must satisfy enum value set" in raw.json()["message"]
    raw = srv.raw("SageMaker.ListClusterOperations", {"ClusterName": name, "NextToken": "garbage"})
    assert raw.status_code == 400 and raw.json()["__type"] == "ValidationException"
    c.delete_cluster(ClusterName=name)
    wait_status(c, name, {"gone"})


def test_superseded_and_in_progress(srv: RunningServer) -> None:
    c = srv.client()
    first = c.batch_add_cluster_nodes(ClusterName=CONT, NodesToAdd=[
        {"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1}])
    assert first["Successful"]
    ops = c.list_cluster_operations(ClusterName=CONT)["ClusterOperationSummaries"]
    assert ops[0]["Type"] == "Scaling" and ops[0]["Status"] in ("InProgress", "Done")
    _wait_ops_done(c, CONT)


def test_eks_only_operations_answer_for_slurm(srv: RunningServer) -> None:
    c = srv.client()
    arn = c.describe_cluster(ClusterName=CONT)["ClusterArn"]
    node = c.list_cluster_nodes(ClusterName=CONT)["ClusterNodeSummaries"][0]["InstanceId"]
    # a node an earlier test added may still be booting (a Continuous cluster's scaling is Done once recorded): the
    # snapshot is taken once the cluster is at rest, so only the rejected calls could change it
    deadline = time.monotonic() + 30
    while any(g["CurrentCount"] != g["TargetCount"] for g in _state(c, CONT)["InstanceGroups"]):
        assert time.monotonic() < deadline, "the cluster never came to rest"
        time.sleep(0.05)
    before = _state(c, CONT)
    msg = rejected(c.move_cluster_nodes, SourceClusterArn=arn, SourceInstanceGroupName="compute-group",
                   TargetClusterArn=arn, TargetInstanceGroupName="controller-group", NodeIds=[node])
    assert msg == f"MoveClusterNodes is only supported for clusters that use Amazon EKS as the orchestrator; " \
                  f"cluster {CONT} uses Slurm."
    msg = rejected(c.move_cluster_nodes, SourceClusterArn=arn, SourceInstanceGroupName="compute-group",
                   TargetClusterArn=arn, TargetInstanceGroupName="controller-group", NodeIds=[node], InstanceCount=1)
    assert msg == "Specify exactly one of NodeIds, NodeLogicalIds, or InstanceCount."
    other = arn[:-12] + "zzzzzzzzzzzz"
    with pytest.raises(c.exceptions.ResourceNotFound):
        c.move_cluster_nodes(SourceClusterArn=arn, SourceInstanceGroupName="compute-group", TargetClusterArn=other,
                             TargetInstanceGroupName="compute-group", InstanceCount=1)
    for call in (c.attach_cluster_node_volume, c.detach_cluster_node_volume):
        msg = rejected(call, ClusterArn=arn, NodeId=node, VolumeId="vol-0123456789abcdef0")
        assert "only supported for clusters that use Amazon EKS" in msg
    assert _state(c, CONT) == before


def _aws(srv: RunningServer, tmp_path: Path, *args: str, ok: bool = True) -> Any:
    assert srv.credential is not None
    env = {**os.environ, "AWS_ACCESS_KEY_ID": srv.credential.access_key_id,
           "AWS_SECRET_ACCESS_KEY": srv.credential.secret_access_key, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": str(tmp_path / "aws-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "creds"),
           "AWS_PAGER": ""}
    env.pop("AWS_PROFILE", None)
    argv = [sys.executable, "-m", "awscli", "sagemaker", *args, "--endpoint-url", srv.endpoint]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    if not ok:
        assert proc.returncode != 0
        return proc.stderr
    assert proc.returncode == 0, f"{args[0]} failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout) if proc.stdout.strip() else {}


def test_aws_cli(srv: RunningServer, tmp_path: Path) -> None:
    r = _aws(srv, tmp_path, "batch-add-cluster-nodes", "--cluster-name", CONT, "--nodes-to-add",
             "InstanceGroupName=compute-group,IncrementTargetCountBy=1", "--client-token", "cli-token-1")
    again = _aws(srv, tmp_path, "batch-add-cluster-nodes", "--cluster-name", CONT, "--nodes-to-add",
                 "InstanceGroupName=compute-group,IncrementTargetCountBy=1", "--client-token", "cli-token-1")
    assert len(r["Successful"]) == 1 and again["Successful"][0]["NodeLogicalId"] == r["Successful"][0]["NodeLogicalId"]
    # the pinned AWS CLI (1.46.3) has no list-/describe-cluster-operation(s) nor move-cluster-nodes: boto3 here
    c = srv.client()
    ops = c.list_cluster_operations(ClusterName=CONT, Type="Scaling")["ClusterOperationSummaries"][0]
    assert re.fullmatch(UUID_RE, ops["OperationId"]) and ops["Type"] == "Scaling"
    d = c.describe_cluster_operation(ClusterName=CONT, OperationId=ops["OperationId"])
    assert d["ScalingDetails"][0]["InstanceGroupName"] == "compute-group"
    events = c.list_cluster_events(ClusterName=CONT, OperationId=ops["OperationId"])["Events"]
    assert events and all(e["OperationId"] == ops["OperationId"] for e in events)
    err = _aws(srv, tmp_path, "attach-cluster-node-volume", "--cluster-arn", d["ClusterArn"], "--node-id",
               c.list_cluster_nodes(ClusterName=CONT)["ClusterNodeSummaries"][0]["InstanceId"],
               "--volume-id", "vol-0123456789abcdef0", ok=False)
    assert "(ValidationException)" in err and "Amazon EKS" in err
    err = _aws(srv, tmp_path, "batch-add-cluster-nodes", "--cluster-name", PLAIN, "--nodes-to-add",
               "InstanceGroupName=compute-group,IncrementTargetCountBy=1", ok=False)
    assert "(ValidationException)" in err and "NodeProvisioningMode set to Continuous" in err
    _wait_ops_done(srv.client(), CONT)


def test_health_check_is_a_deep_health_check_operation(srv: RunningServer) -> None:
    c = srv.client()
    _wait_ops_done(c, PLAIN)
    c.start_cluster_health_check(ClusterName=PLAIN, DeepHealthCheckConfigurations=[
        {"InstanceGroupName": "compute-group", "DeepHealthChecks": ["InstanceStress"]}])
    ops = c.list_cluster_operations(ClusterName=PLAIN, Type="DeepHealthCheck")["ClusterOperationSummaries"]
    assert len(ops) == 1
    events = c.list_cluster_events(ClusterName=PLAIN, OperationId=ops[0]["OperationId"])["Events"]
    assert events
    done = _wait_ops_done(c, PLAIN, timeout=60)
    assert {o["OperationId"]: o["Status"] for o in done}[ops[0]["OperationId"]] == "Done"
