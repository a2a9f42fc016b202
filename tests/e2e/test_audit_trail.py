"""The audit trail through CloudTrail's LookupEvents (boto3's cloudtrail client on the SageMaker endpoint): account
isolation, lookup attributes, time range, pagination, AWS's errors, secrets kept out of every record, retention."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from slurmpod.clock import FakeClock
from slurmpod.domain.audit import AuditRecord
from slurmpod.security.credentials import Credential, CredentialStore
from slurmpod.security.secrets import SecretStore
from slurmpod.service.audit import AuditService
from slurmpod.settings import Settings
from slurmpod.store.audit import AuditFilter
from slurmpod.store.sql import SqlStore
from tests.serverproc import RunningServer, free_port, seed_groups, sign_headers, thread_server, unsigned

PASSWORD = "Pa55w0rd-never-in-the-trail"
OTHER = "222233334444"


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated",
                        reconcile_interval=0.1, simulated_launch_delay=0.01)
    with thread_server(settings) as s:
        yield s


def trail(srv: RunningServer, cred: Credential | None = None, region: str = "us-east-1") -> Any:
    c = cred or srv.credential
    assert c is not None
    return boto3.client("cloudtrail", endpoint_url=srv.endpoint, region_name=region,
                        aws_access_key_id=c.access_key_id, aws_secret_access_key=c.secret_access_key,
                        config=Config(retries={"max_attempts": 1}))


def names(resp: dict[str, Any]) -> list[str]:
    return [e["EventName"] for e in resp["Events"]]


def test_calls_are_visible_to_their_account_only(srv: RunningServer) -> None:
    other = CredentialStore(srv.state_dir).create(OTHER)
    srv.client().create_cluster(ClusterName="mine", InstanceGroups=seed_groups(1))
    srv.client(credential=other).list_clusters()
    mine = trail(srv).lookup_events()["Events"]
    assert "CreateCluster" in [e["EventName"] for e in mine] and "ListClusters" not in [e["EventName"] for e in mine]
    theirs = trail(srv, other).lookup_events(
        LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": "CreateCluster"}])
    assert theirs["Events"] == []
    assert "ListClusters" in names(trail(srv, other).lookup_events())
    created = next(e for e in mine if e["EventName"] == "CreateCluster")
    rec = json.loads(created["CloudTrailEvent"])
    assert rec["userIdentity"]["accountId"] == rec["recipientAccountId"] == "123456789012"
    assert rec["eventSource"] == created["EventSource"] == "sagemaker.amazonaws.com"
    assert rec["sourceIPAddress"] == "127.0.0.1" and rec["userAgent"].startswith("Boto3/")
    assert rec["readOnly"] is False and created["ReadOnly"] == "false"
    assert rec["requestParameters"]["clusterName"] == "mine"
    assert rec["responseElements"]["clusterArn"].startswith("arn:aws:sagemaker:us-east-1:123456789012:cluster/")
    assert len(rec["requestID"]) == 36 and rec["eventID"] == created["EventId"]
    assert {"ResourceType": "AWS::SageMaker::Cluster", "ResourceName": "mine"} in created["Resources"]
    # the trail, too, is per region (CloudTrail's event history is)
    assert "CreateCluster" not in names(trail(srv, region="eu-west-1").lookup_events())


def test_errors_and_refused_signatures_are_recorded_without_secrets(srv: RunningServer) -> None:
    assert srv.credential is not None
    arn = SecretStore(srv.state_dir).create("acct-db", json.dumps({"username": "slurm", "password": PASSWORD}),
                                            "123456789012", "us-east-1").arn
    c = srv.client()
    groups = seed_groups(1)
    groups[0]["MinInstanceCount"] = 1
    c.create_cluster(ClusterName="acct", InstanceGroups=groups, NodeProvisioningMode="Continuous",
                     Orchestrator={"Slurm": {"AccountingDatabase": {"Endpoint": "10.0.0.9", "SecretArn": arn}}})
    # a member called Password (not in the model): refused, and hidden in the record
    resp = srv.raw("SageMaker.CreateCluster",
                   {"ClusterName": "bad", "InstanceGroups": [{"InstanceGroupName": "g", "Password": PASSWORD}]})
    assert resp.status_code == 400, resp.text
    # a refused signature: the key exists, the secret is wrong
    wrong = Credential(srv.credential.access_key_id, "wrong-secret-" + "x" * 27, srv.credential.account_id, 0.0)
    with pytest.raises(ClientError) as info:
        srv.client(credential=wrong).describe_cluster(ClusterName="acct")
    assert info.value.response["Error"]["Code"] == "InvalidSignatureException"
    events = {e["EventName"]: e for e in trail(srv).lookup_events()["Events"]}  # the oldest of each name
    refused = json.loads(events["DescribeCluster"]["CloudTrailEvent"])
    assert refused["errorCode"] == "InvalidSignatureException" and refused["requestParameters"] is None
    bad = [json.loads(e["CloudTrailEvent"]) for e in trail(srv).lookup_events(
        LookupAttributes=[{"AttributeKey": "ResourceName", "AttributeValue": "bad"}])["Events"]]
    assert bad[0]["errorCode"] == resp.json()["__type"] and bad[0]["errorMessage"] == resp.json()["message"]
    assert bad[0]["requestParameters"]["instanceGroups"][0]["password"] == "HIDDEN_DUE_TO_SECURITY_REASONS"
    created = json.loads(events["CreateCluster"]["CloudTrailEvent"])
    assert created["requestParameters"]["orchestrator"]["slurm"]["accountingDatabase"]["secretArn"] == arn
    # nothing secret anywhere: not the database password, not a secret access key, not the wrong secret
    store = SqlStore(Settings(state_dir=srv.state_dir).database_url)
    try:
        text = "\n".join(r.detail + json.dumps(r.resources) for r in store.audit.iter_all())
    finally:
        store.close()
    for secret in (PASSWORD, srv.credential.secret_access_key, wrong.secret_access_key, "Signature="):
        assert secret not in text


def test_lookup_attributes_time_range_and_pages(srv: RunningServer) -> None:
    c = srv.client()
    for _ in range(5):
        c.list_clusters()
    t = trail(srv)
    by_name = t.lookup_events(LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": "ListClusters"}],
                              MaxResults=2)
    assert names(by_name) == ["ListClusters"] * 2 and "NextToken" in by_name
    seen = [e["EventId"] for e in by_name["Events"]]
    token = by_name["NextToken"]
    while token:
        page = t.lookup_events(LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": "ListClusters"}],
                               MaxResults=2, NextToken=token)
        seen += [e["EventId"] for e in page["Events"]]
        token = page.get("NextToken")
    assert len(seen) == len(set(seen)) == 5
    times = [e["EventTime"] for e in t.lookup_events(MaxResults=50)["Events"]]
    assert times == sorted(times, reverse=True)  # newest first
    paginated = list(t.get_paginator("lookup_events").paginate(
        LookupAttributes=[{"AttributeKey": "ReadOnly", "AttributeValue": "true"}], PaginationConfig={"PageSize": 3}))
    assert all(e["ReadOnly"] == "true" for p in paginated for e in p["Events"])
    one = t.lookup_events(LookupAttributes=[{"AttributeKey": "EventId", "AttributeValue": seen[0]}])
    assert [e["EventId"] for e in one["Events"]] == [seen[0]]
    assert srv.credential is not None
    key = t.lookup_events(LookupAttributes=[{"AttributeKey": "AccessKeyId",
                                             "AttributeValue": srv.credential.access_key_id}])
    assert len(key["Events"]) >= 5
    future = datetime.now(UTC) + timedelta(hours=1)
    assert t.lookup_events(StartTime=future)["Events"] == []
    assert len(t.lookup_events(EndTime=future, StartTime=future - timedelta(hours=2))["Events"]) >= 5


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"LookupAttributes": [{"AttributeKey": "EventName", "AttributeValue": "A"},
                           {"AttributeKey": "EventName", "AttributeValue": "B"}]}, "InvalidLookupAttributesException"),
    ({"LookupAttributes": [{"AttributeKey": "ReadOnly", "AttributeValue": "maybe"}]},
     "InvalidLookupAttributesException"),
    ({"StartTime": datetime(2030, 1, 2, tzinfo=UTC), "EndTime": datetime(2030, 1, 1, tzinfo=UTC)},
     "InvalidTimeRangeException"),
    ({"NextToken": "not-a-token"}, "InvalidNextTokenException"),
])
def test_lookup_errors_are_cloudtrails(srv: RunningServer, kwargs: dict[str, Any], code: str) -> None:
    with pytest.raises(ClientError) as info:
        trail(srv).lookup_events(**kwargs)
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_bad_max_results_token_reuse_and_other_operations(srv: RunningServer) -> None:
    assert srv.credential is not None
    for _ in range(3):
        srv.client().list_clusters()
    page = trail(srv).lookup_events(MaxResults=1)
    with pytest.raises(ClientError) as info:  # a token of other criteria
        trail(srv).lookup_events(MaxResults=1, NextToken=page["NextToken"],
                                 LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": "X"}])
    assert info.value.response["Error"]["Code"] == "InvalidNextTokenException"

    def post(target: str, body: dict[str, Any], service: str = "cloudtrail") -> requests.Response:
        data = json.dumps(body).encode()
        h = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": target}
        h = sign_headers("POST", srv.endpoint + "/", data, h, srv.credential, "us-east-1")  # type: ignore[arg-type]
        if service != "sagemaker":
            h["Authorization"] = h["Authorization"].replace("/sagemaker/", f"/{service}/")
        with unsigned():
            return requests.post(srv.endpoint + "/", data=data, headers=h, timeout=10)

    prefix = "com.amazonaws.cloudtrail.v20131101.CloudTrail_20131101."
    # the re-signed scope no longer matches the signature: the service check comes first
    assert post(prefix + "LookupEvents", {"MaxResults": 51}).json()["__type"] == "InvalidSignatureException"
    with pytest.raises(ClientError) as info:
        boto3.client("cloudtrail", endpoint_url=srv.endpoint, region_name="us-east-1",
                     aws_access_key_id=srv.credential.access_key_id,
                     aws_secret_access_key=srv.credential.secret_access_key,
                     config=Config(parameter_validation=False)).lookup_events(MaxResults=51)
    assert info.value.response["Error"]["Code"] == "InvalidMaxResultsException"
    with pytest.raises(ClientError) as info:
        trail(srv).describe_trails()
    assert info.value.response["Error"]["Code"] == "UnsupportedOperationException"
    # a SageMaker-scoped signature on a CloudTrail target: AWS's wrong-service error
    wrong = post(prefix + "LookupEvents", {}, service="sagemaker")
    assert wrong.status_code == 403 and wrong.json() == {
        "__type": "InvalidSignatureException", "message": "Credential should be scoped to correct service: "
                                                          "'cloudtrail'. "}


def test_retention_prunes_old_records(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'a.db'}")
    clock = FakeClock(1_000_000_000.0)
    try:
        svc = AuditService(store.audit, clock, retention_days=1)

        def rec(i: int, t: float) -> AuditRecord:
            return AuditRecord(f"00000000-0000-0000-0000-{i:012d}", t, "ListClusters", "sagemaker.amazonaws.com",
                               "123456789012", "us-east-1", "AKIA", "AKIA", True, (), None, "{}")

        svc.record(rec(1, clock.now() - 2 * 86400))  # pruning ran before it was added (first record)
        clock.advance(3600.0)  # an hour later the next record prunes again
        svc.record(rec(2, clock.now()))
        kept = [r.event_id for r in store.audit.iter_all()]
        assert kept == ["00000000-0000-0000-0000-000000000002"]
        f = AuditFilter(account_id="123456789012")
        assert [r.event_id for r in svc.lookup(f, cursor=None, limit=10)] == kept
        with pytest.raises(ValueError):
            AuditService(store.audit, clock, retention_days=0)
    finally:
        store.close()


def test_slurmpod_audit_lists_and_follows(srv: RunningServer) -> None:
    import os
    import subprocess
    import sys

    srv.client().list_clusters()
    argv = [sys.executable, "-m", "slurmpod.cli", "audit", "--state-dir", str(srv.state_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMPOD_")}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert out.returncode == 0, out.stderr
    assert "ListClusters" in out.stdout and "123456789012" in out.stdout and "sagemaker.amazonaws.com" in out.stdout
    follow = subprocess.Popen([*argv, "--follow", "--event-name", "DescribeCluster"], stdout=subprocess.PIPE,  # noqa: S603
                              stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(1.5)  # the follower has read the (empty) history
        with pytest.raises(ClientError):
            srv.client().describe_cluster(ClusterName="nope")
        assert follow.stdout is not None
        line = follow.stdout.readline()
        assert "DescribeCluster ResourceNotFound" in line
    finally:
        follow.terminate()
        follow.wait(timeout=10)


def _record(i: int, t: float, name: str = "ListClusters") -> AuditRecord:
    return AuditRecord(f"00000000-0000-0000-0000-{i:012d}", t, name, "sagemaker.amazonaws.com", "123456789012",
                       "us-east-1", "AKIA", "AKIA", name.startswith("List"), (), None, "{}")


def test_changes_are_written_at_once_other_calls_by_the_writer(tmp_path: Path) -> None:
    """A change's record is committed before ``record`` returns; a read's is queued, written by the writer (one
    transaction per batch), seen by ``lookup`` at once (it waits for the queue) and written by ``close``."""
    store = SqlStore(f"sqlite:///{tmp_path / 'a.db'}")
    clock = FakeClock(1_000_000_000.0)
    svc = AuditService(store.audit, clock)
    try:
        svc.record(_record(1, clock.now(), "CreateCluster"))
        assert [r.event_name for r in store.audit.iter_all()] == ["CreateCluster"]
        built: list[int] = []

        def make(i: int) -> Any:
            def build() -> AuditRecord:
                built.append(i)
                return _record(i, clock.now())
            return build

        for i in range(2, 52):
            svc.enqueue(make(i))
        f = AuditFilter(account_id="123456789012")
        assert len(svc.lookup(f, cursor=None, limit=100)) == 51  # every queued record, written before the page
        assert sorted(built) == list(range(2, 52))
        svc.enqueue(make(60))
        svc.close()  # the server's stop: what is queued is written
        assert len(list(store.audit.iter_all())) == 52
        svc.enqueue(make(61))  # after close: written at once
        assert len(list(store.audit.iter_all())) == 53
    finally:
        svc.close()
        store.close()


def test_the_writer_waits_for_requests_in_flight_unless_flushed(tmp_path: Path) -> None:
    import threading

    store = SqlStore(f"sqlite:///{tmp_path / 'a.db'}")
    clock = FakeClock(1_000_000_000.0)
    busy = threading.Event()  # a request in flight: the writer's ``idle`` waits (here: until released)
    waited = threading.Event()

    def idle() -> None:
        waited.set()
        busy.wait(30)

    svc = AuditService(store.audit, clock, idle=idle)
    try:
        svc.enqueue(lambda: _record(1, clock.now()))
        assert waited.wait(10)
        assert list(store.audit.iter_all()) == []  # held back while the API is busy
        busy.set()
        assert svc.flush()
        assert len(list(store.audit.iter_all())) == 1
    finally:
        busy.set()
        svc.close()
        store.close()


def test_a_record_that_cannot_be_built_or_written_loses_only_itself(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'a.db'}")
    clock = FakeClock(1_000_000_000.0)
    svc = AuditService(store.audit, clock)
    try:
        def broken() -> AuditRecord:
            raise RuntimeError("cannot build")

        svc.enqueue(broken)
        assert svc.flush()
        svc.enqueue(lambda: _record(2, clock.now()))
        assert svc.flush()
        assert [r.event_id[-1] for r in store.audit.iter_all()] == ["2"]
    finally:
        svc.close()
        store.close()
