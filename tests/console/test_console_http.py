"""The console over plain HTTP: sign-in, cookies, CSRF, account scoping, forms and their API messages."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import requests

from slurmpod.security.credentials import CredentialStore
from tests.console.conftest import csrf_of, sign_in
from tests.serverproc import RunningServer, seed_groups, wait_status


@pytest.fixture(scope="module")
def cluster(srv: RunningServer) -> str:
    c = srv.client()
    c.create_cluster(ClusterName="web", InstanceGroups=seed_groups(1))
    wait_status(c, "web", {"InService"})
    return "web"


def _signed_in(srv: RunningServer) -> requests.Session:
    assert srv.credential is not None
    s, resp = sign_in(srv.endpoint, srv.credential.access_key_id, srv.credential.secret_access_key)
    assert resp.status_code == 200 and resp.url.endswith("/console/clusters")
    return s


def test_pages_need_a_session(srv: RunningServer) -> None:
    r = requests.get(f"{srv.endpoint}/console/clusters", timeout=10)
    assert r.url.endswith("/console/signin") and "Access key ID" in r.text
    live = requests.get(f"{srv.endpoint}/console/clusters/web/live", timeout=10)
    assert live.status_code == 401
    css = requests.get(f"{srv.endpoint}/console/static/console.css", timeout=10)
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]


def test_sign_in_sets_a_strict_httponly_cookie(srv: RunningServer, cluster: str) -> None:
    assert srv.credential is not None
    s = requests.Session()
    page = s.get(f"{srv.endpoint}/console/signin", timeout=10)
    assert "default-src 'self'" in page.headers["content-security-policy"]
    r = s.post(f"{srv.endpoint}/console/signin", allow_redirects=False, timeout=10, data={
        "csrf_token": csrf_of(page.text), "access_key_id": srv.credential.access_key_id,
        "secret_access_key": srv.credential.secret_access_key})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "slurmpod_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Path=/console" in cookie
    listing = s.get(f"{srv.endpoint}/console/clusters", timeout=10)
    assert cluster in listing.text and "InService" in listing.text


def test_bad_credentials_are_refused(srv: RunningServer) -> None:
    assert srv.credential is not None
    _s, r = sign_in(srv.endpoint, srv.credential.access_key_id, "x" * 40)
    assert r.status_code == 401 and "not valid" in r.text
    _s, r = sign_in(srv.endpoint, "AKIA0000000000000000", srv.credential.secret_access_key)
    assert r.status_code == 401
    s = requests.Session()
    r = s.post(f"{srv.endpoint}/console/signin", timeout=10, data={  # no sign-in CSRF cookie
        "csrf_token": "forged", "access_key_id": srv.credential.access_key_id,
        "secret_access_key": srv.credential.secret_access_key})
    assert r.status_code == 400 and "slurmpod_console" not in s.cookies


def test_forms_need_the_csrf_token(srv: RunningServer, cluster: str) -> None:
    s = _signed_in(srv)
    url = f"{srv.endpoint}/console/clusters/{cluster}/update-software"
    assert s.post(url, data={"group": "compute-group", "timing": "now"}, timeout=10).status_code == 403
    assert s.post(url, data={"csrf_token": "nope", "timing": "now"}, timeout=10).status_code == 403
    page = s.get(f"{srv.endpoint}/console/clusters/{cluster}", timeout=10)
    foreign = s.post(url, data={"csrf_token": csrf_of(page.text), "timing": "now"}, timeout=10,
                     headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403


def test_an_account_sees_only_its_clusters(srv: RunningServer, cluster: str) -> None:
    other = CredentialStore(srv.state_dir).create("210987654321")
    s, r = sign_in(srv.endpoint, other.access_key_id, other.secret_access_key)
    assert r.status_code == 200 and cluster not in r.text and "no clusters" in r.text
    page = s.get(f"{srv.endpoint}/console/clusters/{cluster}", timeout=10)
    assert page.status_code == 404 and f"Cluster {cluster} not found." in page.text
    CredentialStore(srv.state_dir).delete(other.access_key_id)  # a deleted key ends its sessions
    assert s.get(f"{srv.endpoint}/console/clusters", timeout=10).url.endswith("/console/signin")


def test_form_errors_are_the_apis(srv: RunningServer, cluster: str) -> None:
    s = _signed_in(srv)
    page = s.get(f"{srv.endpoint}/console/clusters/{cluster}", timeout=10)
    url = f"{srv.endpoint}/console/clusters/{cluster}/update-software"
    token = csrf_of(page.text)
    r = s.post(url, data={"csrf_token": token, "timing": "now"}, timeout=10)
    assert r.status_code == 400
    c = srv.client(validate=False)
    with pytest.raises(c.exceptions.ClientError) as api:
        c.update_cluster_software(ClusterName=cluster, InstanceGroups=[])
    message = api.value.response["Error"]["Message"]
    assert 'id="groups-error"' in r.text and message.replace("'", "&#39;") in r.text
    # a bad cron for a selected group: UpdateCluster's own message, next to the cron field
    r = s.post(url, data={"csrf_token": token, "group": "compute-group", "timing": "cron", "cron": "0 25 * * ? *"},
               timeout=10)
    assert r.status_code == 400 and 'id="cron-error"' in r.text
    assert "Invalid ScheduleExpression cron(0 25 * * ? *): Hours value 25 is out of range 0-23." in r.text
    assert 'value="0 25 * * ? *"' in r.text  # the form keeps what was typed


def test_one_time_schedule_sets_scheduled_update_config(srv: RunningServer, cluster: str) -> None:
    s = _signed_in(srv)
    page = s.get(f"{srv.endpoint}/console/clusters/{cluster}", timeout=10)
    when = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M")
    r = s.post(f"{srv.endpoint}/console/clusters/{cluster}/update-software", timeout=10, data={
        "csrf_token": csrf_of(page.text), "group": "compute-group", "timing": "once", "at": when})
    assert r.status_code == 200 and f"at({when}:00)" in r.text
    c = srv.client()
    d = wait_status(c, cluster, {"InService"})
    groups = {g["InstanceGroupName"]: g for g in d["InstanceGroups"]}
    assert groups["compute-group"]["ScheduledUpdateConfig"] == {"ScheduleExpression": f"at({when}:00)"}
    assert "ScheduledUpdateConfig" not in groups["controller-group"]
    assert groups["compute-group"]["TargetCount"] == 1 and groups["compute-group"]["InstanceType"] == "ml.t3.medium"


def test_node_reboot_needs_confirmation(srv: RunningServer, cluster: str) -> None:
    s = _signed_in(srv)
    wait_status(srv.client(), cluster, {"InService"})
    node = next(n for n in srv.client().list_cluster_nodes(ClusterName=cluster)["ClusterNodeSummaries"]
                if n["InstanceGroupName"] == "compute-group")["InstanceId"]
    confirm = s.get(f"{srv.endpoint}/console/clusters/{cluster}/nodes/{node}/reboot", timeout=10)
    assert confirm.status_code == 200 and f"Reboot node {node}?" in confirm.text
    r = s.post(f"{srv.endpoint}/console/clusters/{cluster}/nodes/{node}/reboot", timeout=10,
               data={"csrf_token": csrf_of(confirm.text)})
    assert r.status_code == 200 and f"Reboot of {node} started." in r.text
    events = srv.client().list_cluster_events(ClusterName=cluster, NodeId=node)["Events"]
    assert any("Reboot of EC2 Instance" in e["Description"] for e in events)


def test_sign_out(srv: RunningServer) -> None:
    s = _signed_in(srv)
    page = s.get(f"{srv.endpoint}/console/clusters", timeout=10)
    r = s.post(f"{srv.endpoint}/console/signout", data={"csrf_token": csrf_of(page.text)}, timeout=10)
    assert r.url.endswith("/console/signin")
    assert s.get(f"{srv.endpoint}/console/clusters", timeout=10).url.endswith("/console/signin")


def test_region_picker_switches_the_console_region(srv: RunningServer, cluster: str) -> None:
    s = _signed_in(srv)
    page = s.get(f"{srv.endpoint}/console/clusters", timeout=10)
    assert 'name="region"' in page.text and "<option value=\"us-east-1\" selected>" in page.text
    assert f">{cluster}<" in page.text
    r = s.post(f"{srv.endpoint}/console/region", data={"csrf_token": csrf_of(page.text), "region": "moon-1"},
               timeout=10)
    assert "is not an AWS region name" in r.text
    r = s.post(f"{srv.endpoint}/console/region", data={"csrf_token": csrf_of(page.text), "region": "eu-west-1"},
               timeout=10)
    assert r.status_code == 200 and "<option value=\"eu-west-1\" selected>" in r.text
    assert f">{cluster}<" not in r.text  # the cluster lives in us-east-1
    assert s.get(f"{srv.endpoint}/console/clusters/{cluster}", timeout=10).status_code == 404
    r = s.post(f"{srv.endpoint}/console/region", data={"csrf_token": "forged", "region": "us-east-1"}, timeout=10)
    assert r.status_code == 403
