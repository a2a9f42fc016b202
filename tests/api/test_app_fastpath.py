"""``ApiApp`` answers POST / itself: the same status, body, headers and audit record as the Starlette route it
bypasses, and every other request still goes to Starlette; a change's audit record is committed before its answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from slurmpod.security.credentials import CredentialStore
from slurmpod.server import Server, build_server
from slurmpod.settings import Settings


class Answer:
    def __init__(self, status: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, content

    def json(self) -> Any:
        return json.loads(self.content)


def call(app: Any, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Answer:
    """One HTTP request straight into the ASGI ``app`` (the test client needs a package the venv lacks)."""
    pairs = {"host": "testserver", **(headers or {})}.items()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "client": ("127.0.0.1", 50000),
             "server": ("testserver", 80),
             "headers": [(k.lower().encode(), v.encode()) for k, v in pairs]}
    sent: list[dict[str, Any]] = []
    given = [False]

    async def receive() -> dict[str, Any]:
        if not given[0]:
            given[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return Answer(start["status"], {k.decode(): v.decode() for k, v in start["headers"]},
                  b"".join(m.get("body", b"") for m in sent[1:]))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = build_server(Settings(state_dir=tmp_path, provider="simulated", simulated_launch_delay=0.0, port=1))
    try:
        yield srv
    finally:
        if srv.app.ctx.audit is not None:
            srv.app.ctx.audit.close()
        srv.store.close()


def _signed(tmp_path: Path, target: str, body: dict[str, object]) -> tuple[bytes, dict[str, str]]:
    cred = CredentialStore(tmp_path).get_or_create("123456789012")
    raw = json.dumps(body).encode()
    req = AWSRequest("POST", "http://testserver/", data=raw, headers={
        "X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"})
    SigV4Auth(Credentials(cred.access_key_id, cred.secret_access_key), "sagemaker", "us-east-1").add_auth(req)
    return raw, dict(req.headers.items())


@pytest.mark.parametrize("target, body", [
    ("SageMaker.DescribeCluster", {"ClusterName": "nope"}),  # signed, a modeled error
    ("SageMaker.ListClusters", {}),  # signed, 200
])
def test_fast_path_answers_like_the_starlette_route(server: Server, tmp_path: Path, target: str,
                                                    body: dict[str, object]) -> None:
    answers = []
    for app in (server.app, server.app.starlette):
        raw, headers = _signed(tmp_path, target, body)
        before = len(list(server.store.audit.iter_all()))
        resp = call(app, "POST", "/", raw, headers)
        assert server.app.ctx.audit is not None and server.app.ctx.audit.flush()  # (a read's: queued, see below)
        records = list(server.store.audit.iter_all())
        assert len(records) == before + 1  # one audit record
        assert records[-1].event_name == target.split(".")[1]
        assert json.loads(records[-1].detail)["requestID"] == resp.headers["x-amzn-requestid"]
        answers.append((resp.status_code, resp.json(), resp.headers["content-type"],
                        int(resp.headers["content-length"]) == len(resp.content)))
    assert answers[0] == answers[1]
    assert server.app.ctx.gate is not None and server.app.ctx.gate.busy() == 0


def test_a_changes_record_is_committed_before_its_answer(server: Server, tmp_path: Path) -> None:
    """A read's record may follow its answer (the audit writer); a change's never does."""
    from tests.serverproc import seed_groups

    raw, headers = _signed(tmp_path, "SageMaker.CreateCluster", {"ClusterName": "c1",
                                                                 "InstanceGroups": seed_groups(1)})
    resp = call(server.app, "POST", "/", raw, headers)
    assert resp.status_code == 200, resp.json()
    records = list(server.store.audit.iter_all())  # no flush: already there
    assert [r.event_name for r in records] == ["CreateCluster"]
    assert json.loads(records[0].detail)["requestID"] == resp.headers["x-amzn-requestid"]


def test_unsigned_and_other_routes(server: Server) -> None:
    refused = call(server.app, "POST", "/", b"{}", {"X-Amz-Target": "SageMaker.ListClusters",
                                                    "Content-Type": "application/x-amz-json-1.1"})
    assert refused.status_code in (400, 403) and "__type" in refused.json()
    assert call(server.app, "GET", "/").status_code == 404  # Starlette's other_method
    assert call(server.app, "GET", "/healthz").json() == {"status": "ok"}
    assert call(server.app, "POST", "/healthz").status_code == 405
