"""``slurmpod server`` on PostgreSQL runs its reconciler in a child process at a lower CPU priority
(``slurmpod.background.ReconcilerProcess``): the API's /readyz and /metrics include the child's leases and
instruments; a child that dies is started again and goes on reconciling; the child dies with a SIGKILLed server and
stops with a SIGTERMed one; SQLite keeps the reconciler in the API's process. Issue 18 (DescribeCluster p99)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.serverproc import ServerProcess, free_port, seed_groups, wait_status

pytestmark = pytest.mark.postgres


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a restarted reconciler is the child of the thread that started it)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def reconciler_pid(srv: ServerProcess) -> int:
    assert srv.proc is not None
    for child in _children(srv.proc.pid):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except OSError:
            continue
    raise AssertionError("the server has no reconciler process")


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def server(tmp_path: Path, fresh_pg_url: str) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "state", free_port(), "--provider", "simulated", "--db", fresh_pg_url,
                        "--lease-seconds", "3", "--replica-id", "solo")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_reconciler_runs_niced_in_a_child_and_reports_through_the_api(server: ServerProcess) -> None:
    child = reconciler_pid(server)
    assert os.getpriority(os.PRIO_PROCESS, child) == 10  # --reconciler-nice default
    c = server.client()
    cid = c.create_cluster(ClusterName="bg", InstanceGroups=seed_groups(2))["ClusterArn"].rsplit("/", 1)[-1]
    wait_status(c, "bg", {"InService"}, timeout=30)
    ready = requests.get(f"{server.endpoint}/readyz", timeout=5)
    assert ready.status_code == 200
    assert ready.json()["ownedClusters"] == [cid] and ready.json()["replica"] == "solo"
    text = requests.get(f"{server.endpoint}/metrics", timeout=5).text
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types)), "every family once"
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values['slurmpod_lease_changes_total{change="acquired"}'] == 1.0  # the child's instrument
    assert values["slurmpod_owned_clusters"] == 1.0
    assert values["slurmpod_reconcile_pass_duration_seconds_count"] >= 1
    assert values['slurmpod_api_request_duration_seconds_count{code="OK",operation="CreateCluster"}'] == 1.0


def test_a_dead_reconciler_process_is_started_again(server: ServerProcess) -> None:
    first = reconciler_pid(server)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if reconciler_pid(server) != first and requests.get(f"{server.endpoint}/readyz", timeout=5).ok:
                break
        except AssertionError:
            pass
        time.sleep(0.1)
    else:
        pytest.fail("the reconciler process was not started again")
    c = server.client()
    c.create_cluster(ClusterName="after", InstanceGroups=seed_groups(1))
    wait_status(c, "after", {"InService"}, timeout=30)
    assert "starting it again" in server.log.read_text()


def test_the_reconciler_process_dies_with_a_killed_server_and_stops_with_a_terminated_one(
        tmp_path: Path, fresh_pg_url: str) -> None:
    srv = ServerProcess(tmp_path / "state", free_port(), "--provider", "simulated", "--db", fresh_pg_url)
    srv.start()
    try:
        child = reconciler_pid(srv)
        srv.kill9()
        assert _gone(child), "the reconciler outlived its SIGKILLed server"
        srv.start()
        child = reconciler_pid(srv)
        assert srv.proc is not None
        srv.proc.terminate()
        assert srv.proc.wait(timeout=30) == 0
        assert _gone(child)
        assert "released 0 cluster lease(s) (clean stop)" in srv.log.read_text()
    finally:
        srv.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "server", *args], capture_output=True, text=True,
                          timeout=60)


def test_reconciler_options_are_checked(tmp_path: Path) -> None:
    r = _cli("--provider", "simulated", "--state-dir", str(tmp_path), "--reconciler", "process")
    assert r.returncode == 2 and "--reconciler process needs a PostgreSQL --db" in r.stderr
    r = _cli("--provider", "simulated", "--state-dir", str(tmp_path), "--reconciler-nice", "20")
    assert r.returncode == 2 and "--reconciler-nice must be 0-19, not 20" in r.stderr
    assert "Traceback" not in r.stderr
