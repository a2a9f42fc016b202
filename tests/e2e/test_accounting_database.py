"""Orchestrator.Slurm.AccountingDatabase through boto3 (SIMULATED provider: API behaviour only).

The real-daemon test (sacct rows landing in an external MariaDB) is tests/integration/test_external_db_local.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from slurmpod.security.secrets import SecretStore
from tests.serverproc import ROLE, RunningServer, wait_status

ACCOUNT = "123456789012"
PASSWORD = "Sup3r-s3cret-pw"


def _groups() -> list[dict[str, Any]]:
    def g(name: str, node_type: str, count: int) -> dict[str, Any]:
        sc: dict[str, Any] = {"NodeType": node_type}
        if node_type == "Compute":
            sc["PartitionNames"] = ["work"]
        return {"InstanceGroupName": name, "InstanceType": "ml.t3.medium", "InstanceCount": count,
                "ExecutionRole": ROLE, "SlurmConfig": sc}
    return [g("controller", "Controller", 1), g("compute", "Compute", 2)]


def _adb(arn: str, **extra: Any) -> dict[str, Any]:
    return {"Slurm": {"AccountingDatabase": {"Endpoint": "db.example.internal", "SecretArn": arn, **extra}}}


@pytest.fixture
def secret_arn(sim_server: RunningServer) -> str:
    value = json.dumps({"username": "slurm", "password": PASSWORD})
    return SecretStore(sim_server.state_dir).create("acct-db", value, ACCOUNT, "us-east-1").arn


def _error(info: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    err = info.value.response["Error"]
    return str(err["Code"]), str(err["Message"])


def test_requires_continuous(sim_server: RunningServer, secret_arn: str) -> None:
    client = sim_server.client()
    with pytest.raises(ClientError) as info:
        client.create_cluster(ClusterName="acct", InstanceGroups=_groups(), Orchestrator=_adb(secret_arn))
    code, message = _error(info)
    assert code == "ValidationException"
    assert "only supported for clusters using Continuous" in message
    assert client.list_clusters()["ClusterSummaries"] == []


def test_unknown_or_foreign_secret_is_rejected(sim_server: RunningServer, secret_arn: str) -> None:
    client = sim_server.client()
    missing = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:nope-AbCdEf"
    foreign = secret_arn.replace(ACCOUNT, "210987654321")
    for arn in (missing, foreign):
        with pytest.raises(ClientError) as info:
            client.create_cluster(ClusterName="acct", InstanceGroups=_groups(), NodeProvisioningMode="Continuous",
                                  Orchestrator=_adb(arn))
        code, message = _error(info)
        assert code == "ValidationException" and "can't find the specified secret" in message, message
    assert client.list_clusters()["ClusterSummaries"] == []


def test_bad_secret_content_is_rejected_without_echo(sim_server: RunningServer) -> None:
    store = SecretStore(sim_server.state_dir)
    arn = store.create("spacey", json.dumps({"username": "slurm", "password": "has space#x"}), ACCOUNT,
                       "us-east-1").arn
    with pytest.raises(ClientError) as info:
        sim_server.client().create_cluster(ClusterName="acct", InstanceGroups=_groups(),
                                           NodeProvisioningMode="Continuous", Orchestrator=_adb(arn))
    code, message = _error(info)
    assert code == "ValidationException" and "password may only hold" in message
    assert "has space" not in message


def test_echoed_with_defaults_and_never_detached(sim_server: RunningServer, secret_arn: str) -> None:
    client = sim_server.client()
    client.create_cluster(ClusterName="acct", InstanceGroups=_groups(), NodeProvisioningMode="Continuous",
                          Orchestrator=_adb(secret_arn))
    desc = wait_status(client, "acct", {"InService"})
    cluster_id = desc["ClusterArn"].rsplit("/", 1)[1]
    assert desc["Orchestrator"]["Slurm"]["AccountingDatabase"] == {
        "Endpoint": "db.example.internal", "Port": 3306, "Name": f"slurm_acct_db_{cluster_id}",
        "SecretArn": secret_arn,
    }
    assert PASSWORD not in json.dumps(desc, default=str)
    # an update without Orchestrator keeps the database (it can never be detached)
    groups = _groups()
    groups[1]["InstanceCount"] = 3
    client.update_cluster(ClusterName="acct", InstanceGroups=groups)
    desc = client.describe_cluster(ClusterName="acct")
    assert desc["Orchestrator"]["Slurm"]["AccountingDatabase"]["SecretArn"] == secret_arn
    # a new Port/Name replaces the old values
    client.update_cluster(ClusterName="acct", InstanceGroups=groups, Orchestrator=_adb(secret_arn, Port=3307,
                                                                                       Name="acct_db"))
    adb = client.describe_cluster(ClusterName="acct")["Orchestrator"]["Slurm"]["AccountingDatabase"]
    assert (adb["Port"], adb["Name"]) == (3307, "acct_db")
    events = client.list_cluster_events(ClusterName="acct")["Events"]
    assert PASSWORD not in json.dumps(events, default=str)
