"""Test helpers: run a real slurmpod server (in a thread or as a subprocess) and talk to it over HTTP."""

from __future__ import annotations

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

import boto3
import requests
import uvicorn
from botocore.config import Config

from slurmpod.server import Server, build_server
from slurmpod.settings import Settings

ROLE = "arn:aws:iam::123456789012:role/hyperpod-exec-role"


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


def boto_client(endpoint: str, *, validate: bool = True) -> Any:
    return boto3.client(
        "sagemaker",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=Config(parameter_validation=validate, retries={"max_attempts": 1}),
    )


@dataclass
class RunningServer:
    endpoint: str
    port: int
    state_dir: Path
    server: Server | None = None

    def client(self, *, validate: bool = True) -> Any:
        return boto_client(self.endpoint, validate=validate)

    def raw(self, target: str, body: bytes | str | Any, *, content_type: str = "application/x-amz-json-1.1",
            headers: dict[str, str] | None = None) -> requests.Response:
        import json

        data = body if isinstance(body, bytes | str) else json.dumps(body)
        h = {"Content-Type": content_type}
        if target:
            h["X-Amz-Target"] = target
        h.update(headers or {})
        return requests.post(self.endpoint + "/", data=data, headers=h, timeout=30)


@contextmanager
def thread_server(settings: Settings) -> Iterator[RunningServer]:
    """A real HTTP server (uvicorn) in a thread of this process."""
    server = build_server(settings)
    server.start()
    config = uvicorn.Config(server.app, host="127.0.0.1", port=settings.port, log_level="warning")
    uv = uvicorn.Server(config)
    t = threading.Thread(target=uv.run, daemon=True)
    t.start()
    try:
        wait_port(settings.port)
        yield RunningServer(f"http://127.0.0.1:{settings.port}", settings.port, settings.state_dir, server)
    finally:
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

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        logf = self.log.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "slurmpod.cli", "server", "--port", str(self.port), "--state-dir",
             str(self.state_dir), "--reconcile-interval", "0.2", *self.extra],
            stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        logf.close()
        wait_port(self.port)

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self, *, validate: bool = True) -> Any:
        return boto_client(self.endpoint, validate=validate)


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
