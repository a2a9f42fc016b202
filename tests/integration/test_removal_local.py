"""Removing a node that runs a job (real Slurm): the removal waits for the job, up to the drain timeout, and
always says in events what it did to the job; it never ends one silently."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import in_node, running_server
from tests.serverproc import ServerProcess, seed_groups, wait_status

pytestmark = pytest.mark.integration

DRAIN = 10


@pytest.fixture
def drain_server(local_state: Path) -> Iterator[ServerProcess]:
    with running_server(local_state, "--accounting", "none", "--update-drain-timeout", str(DRAIN)) as srv:
        yield srv


def _events(c: Any, name: str) -> list[str]:
    return [e["Description"] for e in c.list_cluster_events(ClusterName=name)["Events"]]


def _submit(state: Path, host: str, seconds: int) -> str:
    r = in_node(state, "rm", None, "sbatch", "--parsable", "-w", host, "-o", "/dev/null", "--wrap", f"sleep {seconds}")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    deadline = time.monotonic() + 30
    while in_node(state, "rm", None, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.3)
    return job


def _wait_gone(c: Any, iid: str, timeout: float) -> float:
    t0 = time.monotonic()
    while any(n["InstanceId"] == iid for n in c.list_cluster_nodes(ClusterName="rm")["ClusterNodeSummaries"]):
        assert time.monotonic() - t0 < timeout, f"{iid} was never removed"
        time.sleep(0.2)
    return time.monotonic() - t0


def test_removal_waits_for_a_job_and_ends_only_what_outlives_the_drain(drain_server: ServerProcess) -> None:
    state = drain_server.state_dir
    c = drain_server.client()
    c.create_cluster(ClusterName="rm", InstanceGroups=seed_groups(2))
    d = wait_status(c, "rm", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    compute = sorted((n for n in c.list_cluster_nodes(ClusterName="rm")["ClusterNodeSummaries"]
                      if n["InstanceGroupName"] == "compute-group"), key=lambda n: n["InstanceId"])
    hosts = {n["InstanceId"]: c.describe_cluster_node(ClusterName="rm", NodeId=n["InstanceId"])["NodeDetails"]
             ["PrivateDnsHostname"] for n in compute}
    first, second = (n["InstanceId"] for n in compute)

    # a job shorter than the drain timeout: the removal waits for it, the job completes
    # (each in-node call is a CLI start, a second or more under load: the job's own end is what is checked, not
    # that it still runs at some instant)
    short = _submit(state, hosts[first], 6)
    c.batch_delete_cluster_nodes(ClusterName="rm", NodeIds=[first])
    time.sleep(1.0)
    assert any(first in n["InstanceId"] for n in c.list_cluster_nodes(ClusterName="rm")["ClusterNodeSummaries"])
    _wait_gone(c, first, 30)
    ended = in_node(state, "rm", None, "squeue", "-h", "-t", "all", "-j", short, "-o", "%T").stdout.strip()
    assert ended == "COMPLETED", ended
    events = _events(c, "rm")
    assert any(f"runs job(s) {short}" in e and "before it is removed" in e for e in events), events
    assert not any("were ended" in e for e in events)

    # a job longer than the drain timeout: ended after it, and an event names it
    long = _submit(state, hosts[second], 600)
    t0 = time.monotonic()
    c.batch_delete_cluster_nodes(ClusterName="rm", NodeIds=[second])
    _wait_gone(c, second, 60)
    assert time.monotonic() - t0 >= DRAIN - 1
    events = _events(c, "rm")
    assert any(f"job(s) {long} still running after the drain timeout ({DRAIN} s) were ended" in e
               for e in events), events
    state_now = in_node(state, "rm", None, "squeue", "-h", "-j", long, "-o", "%T").stdout.strip()
    assert state_now != "RUNNING"
