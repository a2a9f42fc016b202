"""Scenario 5, API throughput vs moto: one boto3 workload against slurmpod and against ``moto_server``.

Both servers run on loopback, started by the benchmark: ``slurmpod server --provider simulated`` (SigV4
checked, full request validation, every write committed to SQLite; simulated launches take 0 s, and the
reconciler boots and deletes the clusters in the same process while the workload runs) and
``moto_server`` (moto's in-memory SageMaker). One client thread sends, per iteration, CreateCluster,
DescribeCluster, ListClusterNodes and DeleteCluster on a fresh 3-node cluster; requests/s is the number
of requests over the wall time, the same boto3 client configuration on both sides.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.api_run import ROLE
from bench.machine import tree_cpu_seconds
from bench.server import BenchServer, free_port
from bench.stats import figure

NAME = "moto_compare"
DESCRIPTION = ("API throughput: CreateCluster + DescribeCluster + ListClusterNodes + DeleteCluster per iteration "
               "(3-node clusters), one boto3 client, against `slurmpod server --provider simulated` (SigV4, full "
               "validation, durable SQLite writes, reconciler running) and `moto_server` (in memory); "
               "requests/s and the slurmpod/moto ratio")
TARGET_RATIO = 1.5  # slurmpod >= 1.5 x moto (issue 21; was 1)
ITERATIONS = 100
QUICK_ITERATIONS = 10
WARMUP = 3
REQUESTS_PER_ITERATION = 4

Progress = Callable[[str], None]


def workload_groups() -> list[dict[str, Any]]:
    """Accepted by both: moto wants a LifeCycleConfig under s3://sagemaker-…; slurmpod records it."""
    lcc = {"SourceS3Uri": "s3://sagemaker-bench-lifecycle/scripts/", "OnCreate": "on_create.sh"}
    return [
        {"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "LifeCycleConfig": lcc},
        {"InstanceGroupName": "compute-group", "InstanceType": "ml.t3.medium", "InstanceCount": 2,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "LifeCycleConfig": lcc},
    ]


def _client(endpoint: str, key: str, secret: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                        aws_secret_access_key=secret, config=Config(retries={"max_attempts": 1}))


def run_workload(client: Any, iterations: int, prefix: str, server_pid: int | None = None,
                 cpu_ms: list[float] | None = None) -> float:
    """Requests per second of ``iterations`` rounds (after a short warm-up that is not counted); with ``cpu_ms``,
    the server process's CPU milliseconds per request are appended to it."""
    groups = workload_groups()

    def one(i: int) -> None:
        name = f"{prefix}-{i}"
        client.create_cluster(ClusterName=name, InstanceGroups=groups)
        client.describe_cluster(ClusterName=name)
        client.list_cluster_nodes(ClusterName=name)
        client.delete_cluster(ClusterName=name)

    for i in range(WARMUP):
        one(-1 - i)
    cpu0 = tree_cpu_seconds(server_pid) if server_pid else 0.0
    t0 = time.perf_counter()
    for i in range(iterations):
        one(i)
    rate = iterations * REQUESTS_PER_ITERATION / (time.perf_counter() - t0)
    if cpu_ms is not None and server_pid:
        cpu_ms.append((tree_cpu_seconds(server_pid) - cpu0) / (iterations * REQUESTS_PER_ITERATION) * 1000)
    return rate


class MotoServer:
    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("moto_server") or ""
        argv = [exe] if exe else [sys.executable, "-m", "moto.server"]
        with self.log.open("ab") as logf:
            self.proc = subprocess.Popen([*argv, "-H", "127.0.0.1", "-p", str(self.port)], stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited ({self.proc.returncode}); see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("moto_server did not listen within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def run(
    quick: bool = False, workdir: Path | None = None, progress: Progress = print, rounds: int = 3
) -> dict[str, Any]:
    iterations = QUICK_ITERATIONS if quick else ITERATIONS
    rounds = 1 if quick else rounds
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-moto-", dir=workdir))
    sp = BenchServer(root / "slurmpod", provider="simulated", extra=("--simulated-launch-delay", "0"))
    moto = MotoServer(root / "moto.log")
    sp_rates: list[float] = []
    moto_rates: list[float] = []
    sp_cpu: list[float] = []  # server CPU ms per request, per round
    moto_cpu: list[float] = []
    try:
        sp.start()
        moto.start()
        cred = sp.credential()
        sp_client = _client(sp.endpoint, cred.access_key_id, cred.secret_access_key)
        moto_client = _client(f"http://127.0.0.1:{moto.port}", "testing", "testing")
        for r in range(rounds):  # alternate the sides so both see the same machine noise
            order = ("slurmpod", "moto") if r % 2 == 0 else ("moto", "slurmpod")
            for side in order:
                if side == "slurmpod":
                    sp_rates.append(run_workload(sp_client, iterations, f"bench-api-{r}",
                                                 sp.proc.pid if sp.proc else None, sp_cpu))
                else:
                    moto_rates.append(run_workload(moto_client, iterations, f"bench-api-{r}",
                                                   moto.proc.pid if moto.proc else None, moto_cpu))
            progress(f"round {r + 1}/{rounds}: slurmpod {sp_rates[-1]:.0f} req/s, moto {moto_rates[-1]:.0f} req/s")
    finally:
        sp.stop()
        moto.stop()
        shutil.rmtree(root, ignore_errors=True)
    return result_doc(sp_rates, moto_rates, iterations, sp_cpu, moto_cpu)


def result_doc(sp_rates: list[float], moto_rates: list[float], iterations: int,
               sp_cpu: list[float] | None = None, moto_cpu: list[float] | None = None) -> dict[str, Any]:
    import statistics

    sp, mo = statistics.median(sp_rates), statistics.median(moto_rates)
    ratio = sp / mo if mo else 0.0
    out = {
        "description": DESCRIPTION,
        "iterations": iterations,
        "requests_per_iteration": REQUESTS_PER_ITERATION,
        "slurmpod_rps": figure(sp, "req/s"),
        "moto_rps": figure(mo, "req/s"),
        "slurmpod_samples": [round(x, 1) for x in sp_rates],
        "moto_samples": [round(x, 1) for x in moto_rates],
        "ratio": figure(ratio, "ratio", TARGET_RATIO, at_least=True),  # slurmpod / moto >= 1.5
    }
    if sp_cpu and moto_cpu:  # the servers' own CPU per request (less at the mercy of the machine's load)
        out["slurmpod_server_cpu_per_request"] = figure(statistics.median(sp_cpu), "ms")
        out["moto_server_cpu_per_request"] = figure(statistics.median(moto_cpu), "ms")
    return out
