"""Test helpers: run a real slurmpod server (in a thread or as a subprocess) and talk to it over HTTP.

Every server started here gets an access key in its state dir (``slurmpod.security.credentials``) before it starts;
``client()`` / ``boto_client()`` use it and ``raw()`` signs with botocore's SigV4 (``sign=False`` for
unsigned). Tests written before authentication existed post with plain ``requests`` to these servers;
so they keep exercising the API behind the signature check, ``requests.Session.send`` is wrapped (tests
only) to sign any unsigned POST to a server started here, unless inside ``unsigned()``.
"""

from __future__ import annotations

import contextvars
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import requests
import uvicorn
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from slurmpod.security.credentials import Credential, CredentialStore
from slurmpod.server import Server, build_server
from slurmpod.settings import Settings

ROLE = "arn:aws:iam::123456789012:role/hyperpod-exec-role"
ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Identity:
    """How tests talk to one server: an access key of its state dir and the server's region."""

    credential: Credential
    region: str


_SERVERS: dict[str, Identity] = {}  # "127.0.0.1:port" -> identity, for boto_client(endpoint) and the shim
_UNSIGNED: contextvars.ContextVar[bool] = contextvars.ContextVar("slurmpod_tests_unsigned", default=False)


def server_credential(state_dir: Path, account: str = ACCOUNT) -> Credential:
    """An access key of ``account`` in ``state_dir`` (the existing one if there is one)."""
    return CredentialStore(state_dir).get_or_create(account)


def sign_headers(method: str, url: str, body: bytes, headers: dict[str, str], credential: Credential,
                 region: str) -> dict[str, str]:
    """``headers`` plus X-Amz-Date and Authorization, signed by botocore's SigV4Auth (service sagemaker)."""
    req = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    SigV4Auth(Credentials(credential.access_key_id, credential.secret_access_key), "sagemaker", region).add_auth(req)
    return {**headers, "X-Amz-Date": req.headers["X-Amz-Date"], "Authorization": req.headers["Authorization"]}


@contextmanager
def unsigned() -> Iterator[None]:
    """Requests sent inside this block are not signed by the shim."""
    token = _UNSIGNED.set(True)
    try:
        yield
    finally:
        _UNSIGNED.reset(token)


_original_send = requests.Session.send


def _signing_send(self: requests.Session, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
    parts = urlsplit(request.url or "")
    ident = _SERVERS.get(parts.netloc)
    if (ident is not None and not _UNSIGNED.get() and request.method == "POST" and parts.path in ("", "/")
            and "Authorization" not in request.headers):
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode("utf-8")
            request.body = body
            request.headers["Content-Length"] = str(len(body))
        keep = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "x-amz-target")}
        request.headers.update(sign_headers("POST", request.url or "", body, keep, ident.credential, ident.region))
    return _original_send(self, request, **kwargs)


requests.Session.send = _signing_send  # type: ignore[method-assign]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"server on port {port} did not start")


def boto_client(endpoint: str, *, validate: bool = True, credential: Credential | None = None,
                region: str | None = None) -> Any:
    """A SageMaker client for a test server, signing with ``credential`` (default: the server's key)."""
    ident = _SERVERS.get(urlsplit(endpoint).netloc)
    cred = credential or (ident.credential if ident else None)
    if cred is None:
        raise RuntimeError(f"no credential known for {endpoint}; pass credential=")
    return boto3.client(
        "sagemaker",
        endpoint_url=endpoint,
        region_name=region or (ident.region if ident else "us-east-1"),
        aws_access_key_id=cred.access_key_id,
        aws_secret_access_key=cred.secret_access_key,
        config=Config(parameter_validation=validate, retries={"max_attempts": 1}),
    )


@dataclass
class RunningServer:
    endpoint: str
    port: int
    state_dir: Path
    server: Server | None = None
    credential: Credential | None = None
    region: str = "us-east-1"

    def client(self, *, validate: bool = True, credential: Credential | None = None) -> Any:
        return boto_client(self.endpoint, validate=validate, credential=credential, region=self.region)

    def raw(self, target: str, body: bytes | str | Any, *, content_type: str = "application/x-amz-json-1.1",
            headers: dict[str, str] | None = None, sign: bool = True,
            credential: Credential | None = None) -> requests.Response:
        """POST / as given; signed (botocore SigV4Auth) with ``credential`` or the server's key unless not ``sign``."""
        import json

        data = body if isinstance(body, bytes | str) else json.dumps(body)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        h = {"Content-Type": content_type}
        if target:
            h["X-Amz-Target"] = target
        cred = credential or self.credential
        if sign and cred is not None:
            h = sign_headers("POST", self.endpoint + "/", payload, h, cred, self.region)
        h.update(headers or {})
        with unsigned():
            return requests.post(self.endpoint + "/", data=payload, headers=h, timeout=30)


@contextmanager
def _aws_env(ident: Identity) -> Iterator[None]:
    """The key in the AWS_* variables (for `slurmpod events` and other child processes); restored after."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")
    saved = {n: os.environ.get(n) for n in names}
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.update({"AWS_ACCESS_KEY_ID": ident.credential.access_key_id,
                       "AWS_SECRET_ACCESS_KEY": ident.credential.secret_access_key,
                       "AWS_DEFAULT_REGION": ident.region})
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


@contextmanager
def thread_server(settings: Settings) -> Iterator[RunningServer]:
    """A real HTTP server (uvicorn) in a thread of this process, with an access key of settings.account_id."""
    ident = Identity(server_credential(settings.state_dir, settings.account_id), settings.region)
    netloc = f"127.0.0.1:{settings.port}"
    server = build_server(settings)
    server.start()
    config = uvicorn.Config(server.app, host="127.0.0.1", port=settings.port, log_level="warning")
    uv = uvicorn.Server(config)
    t = threading.Thread(target=uv.run, daemon=True)
    t.start()
    _SERVERS[netloc] = ident
    try:
        wait_port(settings.port)
        with _aws_env(ident):
            yield RunningServer(f"http://{netloc}", settings.port, settings.state_dir, server, ident.credential,
                                settings.region)
    finally:
        _SERVERS.pop(netloc, None)
        uv.should_exit = True
        t.join(timeout=10)
        server.stop()


class ServerProcess:
    """``slurmpod server`` as a child process, so tests can SIGKILL and restart it."""

    def __init__(self, state_dir: Path, port: int, *extra: str) -> None:
        self.state_dir = state_dir
        self.port = port
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state_dir / "server.log"
        args = list(extra)
        self.region = args[args.index("--region") + 1] if "--region" in args[:-1] else "us-east-1"
        self.account = args[args.index("--account-id") + 1] if "--account-id" in args[:-1] else ACCOUNT
        self.credential: Credential | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.credential = server_credential(self.state_dir, self.account)
        _SERVERS[f"127.0.0.1:{self.port}"] = Identity(self.credential, self.region)
        logf = self.log.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "slurmpod.cli", "server", "--port", str(self.port), "--state-dir",
             str(self.state_dir), "--reconcile-interval", "0.2", *self.extra],
            stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        logf.close()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        """Until this process answers /healthz (a bare TCP connect may reach a dying predecessor's socket)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log}")
            try:
                if self._answers():
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"server on port {self.port} did not answer /healthz")

    def _answers(self) -> bool:
        """This process is up (subclasses: the right one of several on a shared port)."""
        return requests.get(f"{self.endpoint}/healthz", timeout=1).status_code == 200

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10  # until the port is free again (no half-dead listener answers)
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    time.sleep(0.05)
            except OSError:
                return

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self, *, validate: bool = True, credential: Credential | None = None) -> Any:
        return boto_client(self.endpoint, validate=validate, credential=credential or self.credential,
                           region=self.region)


def seed_groups(compute_count: int = 2, *, itype: str = "ml.t3.medium") -> list[dict[str, Any]]:
    return [
        {"InstanceGroupName": "controller-group", "InstanceType": itype, "InstanceCount": 1, "ThreadsPerCore": 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute-group", "InstanceType": itype, "InstanceCount": compute_count,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}},
    ]


def wait_status(client: Any, name: str, wanted: set[str], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = client.describe_cluster(ClusterName=name)
        except client.exceptions.ResourceNotFound:
            if "gone" in wanted:
                return {}
            raise
        if last["ClusterStatus"] in wanted:
            return last
        time.sleep(0.1)
    raise TimeoutError(f"cluster {name} did not reach {wanted}; last: {last.get('ClusterStatus')}")


def rejected(call: Any, **kwargs: Any) -> str:
    """``call(**kwargs)`` must answer a ValidationException (HTTP 400): its message."""
    import pytest

    with pytest.raises(Exception) as e:  # noqa: PT011 - botocore's ClientError, checked below
        call(**kwargs)
    err = e.value.response["Error"]  # type: ignore[attr-defined]
    assert err["Code"] == "ValidationException", err
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400  # type: ignore[attr-defined]
    return str(err["Message"])
