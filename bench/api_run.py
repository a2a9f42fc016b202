"""One slurmpod run of the seed scenario through the real API (boto3) and ``slurmpod connect``."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.jobs import JOB_TIMEOUT, PROBE_ARGV, parse_probe
from bench.server import BenchServer
from bench.serverlog import log_offset, milestones

ROLE = "arn:aws:iam::123456789012:role/hyperpod-exec-role"
POLL = 0.05
CREATE_TIMEOUT = 120.0
DELETE_TIMEOUT = 120.0


class ApiRunError(RuntimeError):
    """A slurmpod run did not reach its goal."""


@dataclass
class ApiRun:
    """Seconds from the CreateCluster call for one slurmpod run."""

    in_service: float = 0.0
    job_done: float = 0.0
    sbatch_to_completed: float = 0.0
    connect_overhead: float = 0.0  # `slurmpod connect` start-up + exit around the in-node probe
    delete: float = 0.0  # DeleteCluster -> gone
    milestones: dict[str, float] = field(default_factory=dict)


def seed_groups(compute_count: int = 2) -> list[dict[str, Any]]:
    """The seed topology: one controller, ``compute_count`` compute nodes in partition ``compute``."""
    return [
        {"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute-group", "InstanceType": "ml.t3.medium", "InstanceCount": compute_count,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}},
    ]


def _wait_status(client: Any, name: str, wanted: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        try:
            d = client.describe_cluster(ClusterName=name)
        except client.exceptions.ResourceNotFound:
            return "gone"
        status = d["ClusterStatus"]
        if status in wanted:
            if status == "Failed":
                raise ApiRunError(f"cluster {name} failed: {d.get('FailureMessage')}")
            return status
        time.sleep(POLL)
    raise ApiRunError(f"cluster {name} not {sorted(wanted)} within {timeout:.0f}s (last: {status})")


def delete_and_wait(client: Any, name: str, timeout: float = DELETE_TIMEOUT) -> None:
    try:
        client.delete_cluster(ClusterName=name)
    except client.exceptions.ResourceNotFound:
        return
    _wait_status(client, name, {"gone"}, timeout)


def stop_server(server: BenchServer, warn: Callable[[str], None], timeout: float = DELETE_TIMEOUT) -> None:
    """Deletes the server's clusters through the API (best effort: the state-dir cleanup removes the rest), then
    stops it."""
    try:
        if server.proc is not None and server.proc.poll() is None:
            client = server.client()
            for c in client.list_clusters()["ClusterSummaries"]:
                delete_and_wait(client, c["ClusterName"], timeout=timeout)
    except Exception as exc:
        warn(f"deleting clusters through the API failed: {exc}")
    server.stop()


def run_slurmpod(server: BenchServer, name: str, compute_count: int = 2) -> ApiRun:
    """Create -> InService -> first job COMPLETED -> delete -> gone. The cluster is deleted even on failure."""
    client = server.client()
    result = ApiRun()
    offset = log_offset(server.log)
    wall0 = time.time()
    t0 = time.monotonic()
    created = False
    try:
        client.create_cluster(ClusterName=name, InstanceGroups=seed_groups(compute_count),
                              Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})
        created = True
        _wait_status(client, name, {"InService", "Failed"}, CREATE_TIMEOUT)
        result.in_service = time.monotonic() - t0
        argv = [sys.executable, "-m", "slurmpod.cli", "connect", "--cluster", name,
                "--state-dir", str(server.state_dir), "--", *PROBE_ARGV]
        before = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=JOB_TIMEOUT + 30)
        result.job_done = time.monotonic() - t0
        probe = parse_probe(proc.returncode, proc.stdout, proc.stderr)
        result.sbatch_to_completed = probe.sbatch_to_completed
        result.connect_overhead = (time.monotonic() - before) - probe.sbatch_to_completed
    finally:
        if created:
            t_del = time.monotonic()
            delete_and_wait(client, name)
            result.delete = time.monotonic() - t_del
        result.milestones = milestones(server.log, offset, name, wall0)
    return result
