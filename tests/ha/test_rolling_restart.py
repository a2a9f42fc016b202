"""A rolling restart of two ``slurmpod server --reuse-port`` processes sharing one address (SO_REUSEPORT) and one
PostgreSQL: boto3 clients in standard retry mode on that one endpoint keep calling DescribeCluster and
ListClusters, and UpdateCluster calls are issued while a server shuts down; no call fails, every update is
applied, the clusters converge, and each ends owned by exactly one server. Issue 18, point 4."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config

from tests.ha.conftest import running
from tests.ha.test_two_servers_pg import _grow
from tests.serverproc import ServerProcess, free_port, seed_groups, wait_status

pytestmark = pytest.mark.postgres

LEASE = 3.0
CLUSTERS = 8


class SharedPortServer(ServerProcess):
    """A replica on a port other replicas listen on too: ready once *this* process answers /readyz (each new
    connection goes to any of the listeners, so poll until one reaches it)."""

    def __init__(self, state: Path, port: int, replica: str, *extra: str) -> None:
        super().__init__(state, port, "--reuse-port", "--replica-id", replica, *extra)
        self.replica = replica

    def _answers(self) -> bool:
        r = requests.get(f"{self.endpoint}/readyz", timeout=1)
        return r.status_code == 200 and r.json().get("replica") == self.replica

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.terminate()

    def wait_exit(self, timeout: float = 40.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def shared(tmp_path: Path, fresh_pg_url: str) -> Iterator[list[SharedPortServer]]:
    port = free_port()
    servers = [SharedPortServer(tmp_path / "state", port, f"r{i}", "--provider", "simulated", "--db", fresh_pg_url,
                                "--lease-seconds", str(LEASE)) for i in (1, 2)]
    with running(servers) as started:
        yield started


def std_client(srv: ServerProcess) -> Any:
    assert srv.credential is not None
    return boto3.client("sagemaker", endpoint_url=srv.endpoint, region_name=srv.region,
                        aws_access_key_id=srv.credential.access_key_id,
                        aws_secret_access_key=srv.credential.secret_access_key,
                        config=Config(retries={"mode": "standard"}))


def owners(port: int, replicas: set[str], tries: int = 200) -> dict[str, set[str]]:
    """Each replica's owned clusters, from /readyz answers on the shared port (until every replica answered)."""
    seen: dict[str, set[str]] = {}
    for _ in range(tries):
        body = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()
        seen[body["replica"]] = set(body.get("ownedClusters", []))
        if set(seen) >= replicas:
            return seen
    raise AssertionError(f"only {sorted(seen)} of {sorted(replicas)} answered on port {port}")


def test_rolling_restart_on_a_shared_port_fails_no_call(shared: list[SharedPortServer]) -> None:
    a, b = shared
    port = a.port
    c = std_client(a)
    for i in range(CLUSTERS):
        c.create_cluster(ClusterName=f"r{i}", InstanceGroups=seed_groups(1))
    for i in range(CLUSTERS):
        wait_status(c, f"r{i}", {"InService"}, timeout=60)
    time.sleep(LEASE)
    held = owners(port, {"r1", "r2"})
    assert all(held.values()) and not held["r1"] & held["r2"] and len(held["r1"] | held["r2"]) == CLUSTERS

    calls, retried = [0], [0]
    errors: list[str] = []
    stop = threading.Event()

    def poll(k: int) -> None:
        cl = std_client(a)
        while not stop.is_set():
            try:
                if k % 2:
                    res = cl.list_clusters(MaxResults=100)
                else:
                    res = cl.describe_cluster(ClusterName=f"r{k % CLUSTERS}")
                calls[0] += 1
                retried[0] += bool(res["ResponseMetadata"].get("RetryAttempts"))
            except Exception as exc:  # noqa: BLE001 - counted
                errors.append(repr(exc))
            time.sleep(0.01)

    pollers = [threading.Thread(target=poll, args=(k,)) for k in range(4)]
    for t in pollers:
        t.start()
    grown = []
    try:
        for n, srv in enumerate((a, b)):
            time.sleep(1.0)
            srv.terminate()  # graceful: stop accepting, finish in-flight requests, hand the clusters over
            name = f"r{n + 1}"
            c.update_cluster(ClusterName=name, InstanceGroups=_grow(c, name))  # while it shuts down
            grown.append(name)
            assert srv.wait_exit() == 0
            srv.start()
        time.sleep(1.0)
    finally:
        stop.set()
        for t in pollers:
            t.join()
    assert errors == []
    assert calls[0] > 100
    for i in range(CLUSTERS):
        desc = wait_status(c, f"r{i}", {"InService"}, timeout=60)
        want = 3 if f"r{i}" in grown else 2  # a controller and one compute node; grown: one more
        assert sum(g["CurrentCount"] for g in desc["InstanceGroups"]) == want
        assert len(c.list_cluster_nodes(ClusterName=f"r{i}")["ClusterNodeSummaries"]) == want
    time.sleep(LEASE)
    held = owners(port, {"r1", "r2"})
    assert not held["r1"] & held["r2"] and len(held["r1"] | held["r2"]) == CLUSTERS
    log = a.log.read_text(errors="replace")
    assert "cluster lease(s) (clean stop)" in log
    assert [line for line in log.splitlines() if "Traceback" in line or " 500 " in line] == []
    print(f"{calls[0]} calls during the rolling restart, {retried[0]} needed a retry")
