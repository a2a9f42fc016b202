"""Seed 000's and seed 003's AWS CLI commands pasted unchanged, with only ``AWS_ENDPOINT_URL`` (and a key) set, and
clusters living in regions.

The commands run in bash exactly as the articles print them (``--region ap-northeast-1``, ``$(…)`` captures,
``awk``); the only difference from AWS is the endpoint variable. The console's Update software then shows up in
``aws cloudtrail lookup-events`` with ``sessionCredentialFromConsole: "true"``, as in seed 003. The simulated
provider stands in for nodes (it does not fetch the seed's ``s3://`` lifecycle source).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from slurmpod.settings import Settings
from tests.console.conftest import csrf_of, sign_in
from tests.e2e.test_awscli_seed000 import CLUSTER, CREATE_JSON, SEED_DESCRIBE, UPDATE_JSON
from tests.serverproc import RunningServer, boto_client, free_port, seed_groups, thread_server, wait_status

REGION = "ap-northeast-1"

# seed 000, verbatim (create, describe --query, the two captures of the SSM section, update)
SEED000 = r"""
aws sagemaker create-cluster \
    --cli-input-json file://scripts/create_cluster.json \
    --region ap-northeast-1

aws sagemaker describe-cluster \
    --cluster-name hyperpod-api-driven-cluster \
    --region ap-northeast-1 \
    --query '{Status: ClusterStatus, Strategy: Orchestrator.Slurm.SlurmConfigStrategy, Groups: InstanceGroups[*].{Name: InstanceGroupName, Type: SlurmConfig.NodeType, Partitions: SlurmConfig.PartitionNames}}'

CLUSTER_ID=$(aws sagemaker describe-cluster \
    --cluster-name hyperpod-api-driven-cluster \
    --region ap-northeast-1 \
    --query 'ClusterArn' \
    --output text | awk -F/ '{print $NF}')

CONTROLLER_INSTANCE_ID=$(aws sagemaker list-cluster-nodes \
    --cluster-name hyperpod-api-driven-cluster \
    --region ap-northeast-1 \
    --query 'ClusterNodeSummaries[?InstanceGroupName==`controller-group`].InstanceId' \
    --output text)

echo "Cluster ID: ${CLUSTER_ID}"
echo "Controller Instance ID: ${CONTROLLER_INSTANCE_ID}"
"""  # noqa: E501
SEED000_UPDATE = r"""
aws sagemaker update-cluster \
    --cli-input-json file://scripts/update_cluster.json \
    --region ap-northeast-1
"""
# seed 003 (its <cluster-name> placeholder filled in), and update-cluster-software from the CLI
SEED003_NODES = "aws sagemaker list-cluster-nodes --cluster-name hyperpod-api-driven-cluster " \
                "--instance-group-name-contains controller"
SEED003_UPDATE = "aws sagemaker update-cluster-software --cluster-name hyperpod-api-driven-cluster " \
                 "--instance-groups InstanceGroupName=compute-group"
SEED003_TRAIL = "aws cloudtrail lookup-events --lookup-attributes " \
                "AttributeKey=EventName,AttributeValue=UpdateClusterSoftware --max-items 5"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated", region=REGION,
                        reconcile_interval=0.1, simulated_launch_delay=0.01)
    with thread_server(settings) as srv:
        yield srv


def _bash(srv: RunningServer, tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in bash with ``aws`` = the pinned AWS CLI of this venv and AWS_ENDPOINT_URL set."""
    assert srv.credential is not None
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    aws = bindir / "aws"
    aws.write_text(f'#!/bin/sh\nexec {sys.executable} -m awscli "$@"\n')
    aws.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "AWS_ENDPOINT_URL": srv.endpoint,
        "AWS_ACCESS_KEY_ID": srv.credential.access_key_id,
        "AWS_SECRET_ACCESS_KEY": srv.credential.secret_access_key,
        "AWS_DEFAULT_REGION": REGION,  # seed 003's commands name no region: the user's configured one
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials"),
        "AWS_PAGER": "",
    })
    return subprocess.run(["bash", "-e", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)


def _json_docs(text: str) -> list[Any]:
    """The JSON documents the AWS CLI printed one after another."""
    decoder, docs, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        if text[i] not in "{[":
            i = text.index("\n", i) + 1 if "\n" in text[i:] else len(text)
            continue
        doc, i = decoder.raw_decode(text, i)
        docs.append(doc)
    return docs


def _console_update(srv: RunningServer, group: str) -> None:
    assert srv.credential is not None
    s, resp = sign_in(srv.endpoint, srv.credential.access_key_id, srv.credential.secret_access_key)
    assert resp.status_code == 200 and REGION in resp.text  # the console works in the server's region
    page = s.get(f"{srv.endpoint}/console/clusters/{CLUSTER}", timeout=10)
    assert page.status_code == 200
    r = s.post(f"{srv.endpoint}/console/clusters/{CLUSTER}/update-software", timeout=10,
               data={"csrf_token": csrf_of(page.text), "group": group, "timing": "now"})
    assert r.status_code == 200, r.text


def test_seed000_and_seed003_commands_verbatim(server: RunningServer, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "create_cluster.json").write_text(json.dumps(CREATE_JSON, indent=4))
    (scripts / "update_cluster.json").write_text(json.dumps(UPDATE_JSON, indent=4))
    client = boto_client(server.endpoint, credential=server.credential, region=REGION)

    create, rest = SEED000.split("aws sagemaker describe-cluster", 1)
    first = _bash(server, tmp_path, create)
    assert first.returncode == 0, first.stderr
    arn = json.loads(first.stdout)["ClusterArn"]
    assert arn.startswith("arn:aws:sagemaker:ap-northeast-1:123456789012:cluster/")
    wait_status(client, CLUSTER, {"InService"})
    ran = _bash(server, tmp_path, "aws sagemaker describe-cluster" + rest)
    assert ran.returncode == 0, ran.stderr
    docs = _json_docs(ran.stdout)
    assert docs[0] == SEED_DESCRIBE  # describe-cluster --query, the seed's shape
    controller = client.list_cluster_nodes(ClusterName=CLUSTER, InstanceGroupNameContains="controller-group")
    iid = controller["ClusterNodeSummaries"][0]["InstanceId"]
    assert f"Cluster ID: {arn.rsplit('/', 1)[1]}\n" in ran.stdout
    assert f"Controller Instance ID: {iid}\n" in ran.stdout

    nodes = _bash(server, tmp_path, SEED003_NODES)
    assert nodes.returncode == 0, nodes.stderr
    summaries = json.loads(nodes.stdout)["ClusterNodeSummaries"]
    assert [n["InstanceGroupName"] for n in summaries] == ["controller-group"]
    assert {"InstanceId", "InstanceType", "LaunchTime", "InstanceStatus"} <= set(summaries[0])

    updated = _bash(server, tmp_path, SEED003_UPDATE)
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout) == {"ClusterArn": arn}
    wait_status(client, CLUSTER, {"InService"})
    _console_update(server, "controller-group")  # seed 003: the update came from the console
    wait_status(client, CLUSTER, {"InService"})

    trail = _bash(server, tmp_path, SEED003_TRAIL)
    assert trail.returncode == 0, trail.stderr
    events = json.loads(trail.stdout)["Events"]
    assert [e["EventName"] for e in events] == ["UpdateClusterSoftware", "UpdateClusterSoftware"]
    console, cli = (json.loads(e["CloudTrailEvent"]) for e in events)  # newest first
    assert console["eventSource"] == cli["eventSource"] == "sagemaker.amazonaws.com"
    assert console["sessionCredentialFromConsole"] == "true" and "sessionCredentialFromConsole" not in cli
    assert console["requestParameters"]["instanceGroups"] == [{"instanceGroupName": "controller-group"}]
    assert cli["requestParameters"] == {"clusterName": CLUSTER,
                                        "instanceGroups": [{"instanceGroupName": "compute-group"}]}
    assert cli["awsRegion"] == REGION and cli["userAgent"].startswith("aws-cli/")
    assert cli["userIdentity"]["accessKeyId"] == server.credential.access_key_id  # type: ignore[union-attr]
    assert events[0]["EventTime"] >= events[1]["EventTime"]

    grown = _bash(server, tmp_path, SEED000_UPDATE)
    assert grown.returncode == 0, grown.stderr
    assert json.loads(grown.stdout) == {"ClusterArn": arn}


def test_ssm_start_session_names_slurmpod_connect(server: RunningServer, tmp_path: Path) -> None:
    ran = _bash(server, tmp_path, 'aws ssm start-session --target "sagemaker-cluster:abcdefghijkl_controller-'
                                  'i-0a8df5f9f2b2f8aa3" --region ap-northeast-1')
    assert ran.returncode != 0
    assert "TargetNotConnected" in ran.stderr and "StartSession" in ran.stderr
    assert "slurmpod connect sagemaker-cluster:abcdefghijkl_controller-i-0a8df5f9f2b2f8aa3" in ran.stderr


def test_clusters_live_in_their_region(server: RunningServer) -> None:
    tokyo = boto_client(server.endpoint, region=REGION)
    virginia = boto_client(server.endpoint, region="us-east-1")
    a = tokyo.create_cluster(ClusterName="same", InstanceGroups=seed_groups(1))["ClusterArn"]
    b = virginia.create_cluster(ClusterName="same", InstanceGroups=seed_groups(1))["ClusterArn"]
    assert a != b and ":ap-northeast-1:" in a and ":us-east-1:" in b
    with pytest.raises(ClientError) as dup:
        tokyo.create_cluster(ClusterName="same", InstanceGroups=seed_groups(1))
    assert dup.value.response["Error"]["Code"] == "ResourceInUse"
    assert tokyo.describe_cluster(ClusterName="same")["ClusterArn"] == a
    assert virginia.describe_cluster(ClusterName="same")["ClusterArn"] == b
    assert [c["ClusterArn"] for c in tokyo.list_clusters()["ClusterSummaries"]] == [a]
    assert [c["ClusterArn"] for c in virginia.list_clusters()["ClusterSummaries"]] == [b]
    ireland = boto_client(server.endpoint, region="eu-west-1")
    assert ireland.list_clusters()["ClusterSummaries"] == []
    for client, name in ((ireland, "same"), (virginia, a), (ireland, b)):
        with pytest.raises(ClientError) as info:
            client.describe_cluster(ClusterName=name)
        assert info.value.response["Error"] == {"Code": "ResourceNotFound", "Message": f"Cluster {name} not found."}
    china = boto_client(server.endpoint, region="cn-north-1")
    arn_cn = china.create_cluster(ClusterName="same", InstanceGroups=seed_groups(1))["ClusterArn"]
    assert arn_cn.startswith("arn:aws-cn:sagemaker:cn-north-1:123456789012:cluster/")
    assert china.describe_cluster(ClusterName=arn_cn)["ClusterName"] == "same"
    for client, name in ((tokyo, "same"), (virginia, "same"), (china, arn_cn)):
        wait_status(client, name, {"InService"})
        client.delete_cluster(ClusterName=name)
