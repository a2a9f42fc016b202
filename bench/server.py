"""A ``slurmpod server`` child process (local provider unless told) on a free port with its own state dir."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from slurmpod.security.credentials import Credential, CredentialStore

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
ACCOUNT = "123456789012"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchServer:
    """The server under test (default reconcile interval unless given); its log is ``<state_dir>/server.log``."""

    def __init__(self, state_dir: Path, port: int | None = None, reconcile_interval: float | None = None,
                 provider: str = "local", extra: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.reconcile_interval = reconcile_interval
        self.provider = provider
        self.extra = extra
        self.port = port or free_port()
        self.log = state_dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def credential(self) -> Credential:
        """The access key the benchmark signs with (created in the state dir on first use)."""
        return CredentialStore(self.state_dir).get_or_create(ACCOUNT)

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.credential()
        extra = [] if self.reconcile_interval is None else ["--reconcile-interval", str(self.reconcile_interval)]
        extra += list(self.extra)
        with self.log.open("ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "slurmpod.cli", "server", "--provider", self.provider, "--port", str(self.port),
                 "--state-dir", str(self.state_dir), *extra],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"slurmpod server exited ({self.proc.returncode}); see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"slurmpod server did not listen on port {self.port} within {START_TIMEOUT:.0f}s")

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server log, for a failed run's report."""
        if not self.log.exists():
            return ""
        return "---- server log tail ----\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def client(self) -> Any:
        cred = self.credential()
        return boto3.client(
            "sagemaker", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=cred.access_key_id, aws_secret_access_key=cred.secret_access_key,
            config=Config(retries={"max_attempts": 1}),
        )
