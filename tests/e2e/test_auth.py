"""SigV4 authentication, credentials and tenancy over real HTTP (botocore signs; the server verifies).

Every request here is really signed (or deliberately not); nothing runs with ``--auth none``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import requests
from botocore.exceptions import ClientError

from slurmpod.api.sigv4 import SIGNATURE_MISMATCH
from slurmpod.cli import listen_refusal
from slurmpod.security.credentials import Credential, CredentialStore, credentials_path
from slurmpod.settings import Settings
from tests.serverproc import (
    RunningServer,
    boto_client,
    free_port,
    seed_groups,
    sign_headers,
    thread_server,
    unsigned,
    wait_port,
    wait_status,
)

ACCOUNT_A = "123456789012"
ACCOUNT_B = "210987654321"
LIST = "SageMaker.ListClusters"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.01)
    with thread_server(settings) as srv:
        yield srv


def _err(info: pytest.ExceptionInfo[ClientError]) -> tuple[str, str, int]:
    e = info.value.response
    return e["Error"]["Code"], e["Error"]["Message"], e["ResponseMetadata"]["HTTPStatusCode"]


def _fake(cred: Credential, *, key: str | None = None, secret: str | None = None) -> Credential:
    return Credential(key or cred.access_key_id, secret or cred.secret_access_key, cred.account_id, cred.created)


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


# ---- signatures -------------------------------------------------------------------------------------------------


def test_boto3_with_the_right_key_works(server: RunningServer) -> None:
    client = server.client()
    arn = client.create_cluster(ClusterName="ok", InstanceGroups=seed_groups(1))["ClusterArn"]
    assert arn.startswith(f"arn:aws:sagemaker:us-east-1:{ACCOUNT_A}:cluster/")
    assert [c["ClusterName"] for c in client.list_clusters()["ClusterSummaries"]] == ["ok"]


def test_wrong_secret_is_invalid_signature(server: RunningServer) -> None:
    assert server.credential is not None
    client = server.client(credential=_fake(server.credential, secret="x" * 40))
    with pytest.raises(ClientError) as info:
        client.list_clusters()
    assert _err(info) == ("InvalidSignatureException", SIGNATURE_MISMATCH, 403)


def test_unknown_key_is_unrecognized_client(server: RunningServer) -> None:
    assert server.credential is not None
    client = server.client(credential=_fake(server.credential, key="AKIA" + "Z" * 16))
    with pytest.raises(ClientError) as info:
        client.list_clusters()
    assert _err(info) == ("UnrecognizedClientException", "The security token included in the request is invalid.", 403)


def test_unsigned_request_is_missing_authentication_token(server: RunningServer) -> None:
    resp = server.raw(LIST, {}, sign=False)
    assert resp.status_code == 403
    assert resp.json() == {"__type": "MissingAuthenticationTokenException", "message": "Missing Authentication Token"}
    # rejected before anything else: an unsigned CreateCluster stores nothing, even with a valid body
    resp = server.raw("SageMaker.CreateCluster", {"ClusterName": "nope", "InstanceGroups": seed_groups(1)}, sign=False)
    assert resp.status_code == 403
    assert server.client().list_clusters()["ClusterSummaries"] == []


@pytest.mark.parametrize("header,fragment", [
    ("AWS4-HMAC-SHA256", "Authorization header requires 'Credential' parameter."),
    ("AWS4-HMAC-SHA256 Credential=AKIAAAAAAAAAAAAAAAAA/20240101/us-east-1/sagemaker/aws4_request",
     "Authorization header requires 'Signature' parameter."),
    ("AWS4-HMAC-SHA256 Credential=AKIAAAAAAAAAAAAAAAAA/20240101, SignedHeaders=host, Signature=" + "0" * 64,
     "Credential must have exactly 5 slash-delimited elements"),
    ("AWS4-HMAC-SHA256 Credential=A/20240101/us-east-1/sagemaker/aws4_request, SignedHeaders=host, Signature=zz",
     "Malformed Signature"),
    ("AWS4-HMAC-SHA1 Credential=x", "Unsupported AWS 'algorithm': 'AWS4-HMAC-SHA1'"),
    ("Bearer abc", "Unsupported AWS 'algorithm': 'Bearer'"),
])
def test_malformed_authorization_is_incomplete_signature(server: RunningServer, header: str, fragment: str) -> None:
    resp = server.raw(LIST, {}, sign=False, headers={"Authorization": header, "X-Amz-Date": "20240101T000000Z"})
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert set(body) == {"__type", "message"}
    assert body["__type"] == "IncompleteSignatureException"
    assert fragment in body["message"]


def test_signed_without_date_is_incomplete(server: RunningServer) -> None:
    assert server.credential is not None
    h = sign_headers("POST", server.endpoint + "/", b"{}", {"Content-Type": "application/x-amz-json-1.1",
                                                            "X-Amz-Target": LIST}, server.credential, "us-east-1")
    del h["X-Amz-Date"]
    with unsigned():
        resp = requests.post(server.endpoint + "/", data=b"{}", headers=h, timeout=10)
    assert resp.status_code == 400
    assert resp.json()["__type"] == "IncompleteSignatureException"
    assert "'X-Amz-Date' or a 'Date' header" in resp.json()["message"]


@pytest.mark.parametrize("minutes,pattern", [
    (-10, r"Signature expired: (\d{8}T\d{6}Z) is now earlier than (\d{8}T\d{6}Z) \((\d{8}T\d{6}Z) - 5 min\.\)"),
    (10, r"Signature not yet current: (\d{8}T\d{6}Z) is still later than (\d{8}T\d{6}Z) \((\d{8}T\d{6}Z) \+ 5 min\.\)"),
])
def test_clock_skew_is_rejected(server: RunningServer, minutes: int, pattern: str) -> None:
    client = server.client()
    skewed = datetime.now(UTC).replace(tzinfo=None) + timedelta(minutes=minutes)
    with mock.patch("botocore.auth.get_current_datetime", return_value=skewed), pytest.raises(ClientError) as info:
        client.list_clusters()
    code, message, status = _err(info)
    assert (code, status) == ("InvalidSignatureException", 403)
    m = re.fullmatch(pattern, message)
    assert m, message
    sent, bound, now = (datetime.strptime(x, "%Y%m%dT%H%M%SZ") for x in m.groups())
    assert sent == skewed.replace(microsecond=0)
    assert bound - now == timedelta(minutes=5 if minutes > 0 else -5)
    assert abs((now - datetime.now(UTC).replace(tzinfo=None)).total_seconds()) < 60


def test_within_window_is_accepted_and_replays_within_it_too(server: RunningServer) -> None:
    """AWS accepts a signature for 5 minutes and does not track replays; neither does slurmpod."""
    client = server.client()
    skewed = datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=4)
    with mock.patch("botocore.auth.get_current_datetime", return_value=skewed):
        assert client.list_clusters()["ClusterSummaries"] == []
    assert server.credential is not None
    h = sign_headers("POST", server.endpoint + "/", b"{}", {"Content-Type": "application/x-amz-json-1.1",
                                                            "X-Amz-Target": LIST}, server.credential, "us-east-1")
    with unsigned():
        for _ in range(2):
            assert requests.post(server.endpoint + "/", data=b"{}", headers=h, timeout=10).status_code == 200


def test_tampered_body_is_invalid_signature(server: RunningServer) -> None:
    assert server.credential is not None
    signed_body = json.dumps({"ClusterName": "a", "InstanceGroups": seed_groups(1)}).encode()
    h = sign_headers("POST", server.endpoint + "/", signed_body,
                     {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "SageMaker.CreateCluster"},
                     server.credential, "us-east-1")
    tampered = signed_body.replace(b'"a"', b'"b"')
    with unsigned():
        resp = requests.post(server.endpoint + "/", data=tampered, headers=h, timeout=10)
        assert resp.status_code == 403
        assert resp.json() == {"__type": "InvalidSignatureException", "message": SIGNATURE_MISMATCH}
        # a signed header cannot be swapped either
        resp = requests.post(server.endpoint + "/", data=signed_body,
                             headers={**h, "X-Amz-Target": "SageMaker.DeleteCluster"}, timeout=10)
        assert resp.json()["__type"] == "InvalidSignatureException"
        # nor can a signed X-Amz-Content-SHA256 that does not match the body unbind it
        h2 = sign_headers("POST", server.endpoint + "/", signed_body,
                          {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "SageMaker.CreateCluster",
                           "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}, server.credential, "us-east-1")
        resp = requests.post(server.endpoint + "/", data=tampered, headers=h2, timeout=10)
        assert resp.json()["__type"] == "InvalidSignatureException"
    assert server.client().list_clusters()["ClusterSummaries"] == []


def test_every_aws_region_accepted_other_shapes_and_services_rejected(server: RunningServer) -> None:
    for region in ("eu-west-1", "ap-northeast-1", "us-gov-west-1", "cn-north-1", "eu-isoe-west-1"):
        assert boto_client(server.endpoint, region=region).list_clusters()["ClusterSummaries"] == []
    for region in ("moon-1", "aws-global", "xx-east-1"):
        with pytest.raises(ClientError) as info:
            boto_client(server.endpoint, region=region).list_clusters()
        assert _err(info) == (
            "InvalidSignatureException", f"Credential should be scoped to a valid region, not '{region}'. ", 403)
    assert server.credential is not None
    # a regional endpoint host name must agree with the scope, as on AWS
    for host, region, ok in (("api.sagemaker.ap-northeast-1.amazonaws.com", "ap-northeast-1", True),
                             ("sagemaker.eu-west-1.amazonaws.com:443", "eu-west-1", True),
                             ("api.sagemaker.ap-northeast-1.amazonaws.com", "us-east-1", False)):
        hh = sign_headers("POST", f"http://{host}/", b"{}", {"Content-Type": "application/x-amz-json-1.1",
                                                             "X-Amz-Target": LIST}, server.credential, region)
        with unsigned():
            resp = requests.post(server.endpoint + "/", data=b"{}", headers={**hh, "Host": host}, timeout=10)
        if ok:
            assert resp.status_code == 200, resp.text
        else:
            assert resp.json() == {"__type": "InvalidSignatureException",
                                   "message": f"Credential should be scoped to a valid region, not '{region}'. "}
    h = sign_headers("POST", server.endpoint + "/", b"{}", {"Content-Type": "application/x-amz-json-1.1",
                                                            "X-Amz-Target": LIST}, server.credential, "us-east-1")
    h["Authorization"] = h["Authorization"].replace("/sagemaker/", "/s3/")
    with unsigned():
        resp = requests.post(server.endpoint + "/", data=b"{}", headers=h, timeout=10)
    assert resp.json() == {"__type": "InvalidSignatureException",
                           "message": "Credential should be scoped to correct service: 'sagemaker'. "}


def test_health_endpoints_stay_open(server: RunningServer) -> None:
    with unsigned():
        assert requests.get(server.endpoint + "/healthz", timeout=10).json() == {"status": "ok"}
        assert requests.get(server.endpoint + "/readyz", timeout=10).status_code == 200


# ---- tenancy ----------------------------------------------------------------------------------------------------


def test_accounts_are_isolated(server: RunningServer) -> None:
    a = server.client()
    arn_a = a.create_cluster(ClusterName="shared-name", InstanceGroups=seed_groups(1))["ClusterArn"]
    wait_status(a, "shared-name", {"InService"})
    # a key for account B, created while the server runs (the server re-reads the store)
    cred_b = CredentialStore(server.state_dir).create(ACCOUNT_B)
    b = server.client(credential=cred_b)
    assert b.list_clusters()["ClusterSummaries"] == []
    for ref in ("shared-name", arn_a):
        for call in (lambda r: b.describe_cluster(ClusterName=r),
                     lambda r: b.list_cluster_nodes(ClusterName=r),
                     lambda r: b.update_cluster(ClusterName=r, InstanceGroups=seed_groups(3)),
                     lambda r: b.delete_cluster(ClusterName=r),
                     lambda r: b.batch_delete_cluster_nodes(ClusterName=r, NodeIds=["i-0123456789abcdef0"])):
            with pytest.raises(ClientError) as info:
                call(ref)
            code, message, status = _err(info)
            assert (code, status) == ("ResourceNotFound", 400), message
            assert ACCOUNT_A not in message.replace(arn_a, "")  # says no more than what was asked
    node_id = a.list_cluster_nodes(ClusterName="shared-name")["ClusterNodeSummaries"][0]["InstanceId"]
    with pytest.raises(ClientError) as info:
        b.describe_cluster_node(ClusterName=arn_a, NodeId=node_id)
    assert _err(info)[0] == "ResourceNotFound"
    # B has its own namespace of names; its ARNs carry its account
    arn_b = b.create_cluster(ClusterName="shared-name", InstanceGroups=seed_groups(1))["ClusterArn"]
    assert arn_b.startswith(f"arn:aws:sagemaker:us-east-1:{ACCOUNT_B}:cluster/") and arn_b != arn_a
    assert [c["ClusterArn"] for c in b.list_clusters()["ClusterSummaries"]] == [arn_b]
    assert [c["ClusterArn"] for c in a.list_clusters()["ClusterSummaries"]] == [arn_a]
    # A's cluster is untouched by everything B tried
    d = a.describe_cluster(ClusterName=arn_a)
    assert d["ClusterStatus"] == "InService"
    assert [g["TargetCount"] for g in d["InstanceGroups"]] == [1, 1]


# ---- credentials CLI --------------------------------------------------------------------------------------------


def test_credentials_cli_and_aws_cli(server: RunningServer, tmp_path: Path) -> None:
    r = _cli("credentials", "create", "--state-dir", str(server.state_dir), "--account", ACCOUNT_B)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"AccessKeyId", "SecretAccessKey", "AccountId"}
    assert re.fullmatch(r"AKIA[A-Z0-9]{16}", doc["AccessKeyId"])
    assert re.fullmatch(r"[A-Za-z0-9+/]{40}", doc["SecretAccessKey"])
    assert doc["AccountId"] == ACCOUNT_B
    path = credentials_path(server.state_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}")]  # no temp files left

    listed = _cli("credentials", "list", "--state-dir", str(server.state_dir))
    assert listed.returncode == 0
    assert doc["SecretAccessKey"] not in listed.stdout
    assert {"AccessKeyId": doc["AccessKeyId"], "AccountId": ACCOUNT_B} in [
        {k: x[k] for k in ("AccessKeyId", "AccountId")} for x in json.loads(listed.stdout)]

    env = {**os.environ, "AWS_ACCESS_KEY_ID": doc["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": doc["SecretAccessKey"],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "cfg"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "creds"), "AWS_PAGER": ""}
    aws = [sys.executable, "-m", "awscli", "sagemaker", "list-clusters", "--endpoint-url", server.endpoint]
    out = subprocess.run(aws, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"ClusterSummaries": []}

    assert _cli("credentials", "delete", doc["AccessKeyId"], "--state-dir", str(server.state_dir)).returncode == 0
    out = subprocess.run(aws, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0 and "UnrecognizedClientException" in out.stderr
    bad = _cli("credentials", "create", "--state-dir", str(server.state_dir), "--account", "12")
    assert bad.returncode == 2 and "12 digits" in bad.stderr


def test_store_writes_are_atomic_and_private(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "s")
    made = [store.create(ACCOUNT_A) for _ in range(5)]
    assert {c.access_key_id for c in store.list()} == {c.access_key_id for c in made}
    other = CredentialStore(tmp_path / "s")  # another process's view sees every key
    assert all(other.lookup(c.access_key_id) == c for c in made)
    store.delete(made[0].access_key_id)
    assert other.lookup(made[0].access_key_id) is None
    assert store.get_or_create(ACCOUNT_A) == made[1]


# ---- listening ----------------------------------------------------------------------------------------------------


def test_listen_refusal_rules() -> None:
    assert listen_refusal("127.0.0.1", tls=False, insecure_no_tls=False, auth="sigv4") is None
    assert listen_refusal("::1", tls=False, insecure_no_tls=False, auth="sigv4") is None
    assert listen_refusal("localhost", tls=False, insecure_no_tls=False, auth="none") is None
    assert listen_refusal("0.0.0.0", tls=True, insecure_no_tls=False, auth="sigv4") is None
    assert listen_refusal("10.0.0.5", tls=False, insecure_no_tls=True, auth="sigv4") is None
    assert listen_refusal("10.0.0.5", tls=False, insecure_no_tls=False, auth="sigv4")
    assert listen_refusal("0.0.0.0", tls=True, insecure_no_tls=True, auth="none")


def test_server_refuses_non_loopback_without_tls(tmp_path: Path) -> None:
    port = str(free_port())
    r = _cli("server", "--host", "0.0.0.0", "--port", port, "--state-dir", str(tmp_path / "s"), "--provider",
             "simulated")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith("slurmpod: refusing to listen on non-loopback address 0.0.0.0 without TLS: "
                               "pass --tls-cert FILE --tls-key FILE, or --insecure-no-tls")
    r = _cli("server", "--host", "0.0.0.0", "--port", port, "--state-dir", str(tmp_path / "s"), "--auth", "none",
             "--insecure-no-tls")
    assert r.returncode == 2 and "refusing --auth none on non-loopback address 0.0.0.0" in r.stderr
    assert not (tmp_path / "s").exists()  # refused before touching anything


def test_tls_serves_https(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   capture_output=True, timeout=60, check=True)
    state, port = tmp_path / "state", free_port()
    cred = CredentialStore(state).create(ACCOUNT_A)
    proc = subprocess.Popen([sys.executable, "-m", "slurmpod.cli", "server", "--port", str(port), "--state-dir",
                             str(state), "--provider", "simulated", "--tls-cert", str(cert), "--tls-key", str(key)],
                            cwd=REPO, stdout=(tmp_path / "log").open("wb"), stderr=subprocess.STDOUT)
    client: Any = None
    try:
        wait_port(port)
        import boto3

        client = boto3.client("sagemaker", endpoint_url=f"https://127.0.0.1:{port}", region_name="us-east-1",
                              aws_access_key_id=cred.access_key_id, aws_secret_access_key=cred.secret_access_key,
                              verify=str(cert))
        deadline = time.monotonic() + 10
        while True:
            try:
                assert client.list_clusters()["ClusterSummaries"] == []
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with pytest.raises(requests.exceptions.ConnectionError), unsigned():
            requests.post(f"http://127.0.0.1:{port}/", data=b"{}", timeout=5)  # plain HTTP is not served
    finally:
        if client is not None:
            client.close()  # an idle TLS keep-alive would hold uvicorn's graceful shutdown
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise
