"""Two ``slurmpod server`` processes on one PostgreSQL (simulated provider): any answers the API, each cluster
is reconciled by one through leases, a SIGKILLed owner's clusters are taken over after the lease expires, and
50 concurrent clients creating, updating and deleting clusters against both end with the database agreeing
with what they asked (no 5xx). Issue 18."""

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
from tests.serverproc import ServerProcess, free_port, seed_groups, wait_status

pytestmark = pytest.mark.postgres

LEASE = 3.0


def _servers(state: Path, db: str, *extra: str) -> list[ServerProcess]:
    return [ServerProcess(state, free_port(), "--provider", "simulated", "--db", db, "--lease-seconds", str(LEASE),
                          "--replica-id", f"r{i}", *extra) for i in (1, 2)]


@pytest.fixture
def pair(tmp_path: Path, fresh_pg_url: str, request: pytest.FixtureRequest) -> Iterator[list[ServerProcess]]:
    extra: tuple[str, ...] = getattr(request, "param", ())
    servers = _servers(tmp_path / "state", fresh_pg_url, *extra)
    with running(servers) as started:
        yield started


def owned(srv: ServerProcess) -> list[str]:
    body = requests.get(f"{srv.endpoint}/readyz", timeout=5).json()
    return list(body.get("ownedClusters", []))


def std_client(srv: ServerProcess) -> Any:
    assert srv.credential is not None
    return boto3.client("sagemaker", endpoint_url=srv.endpoint, region_name=srv.region,
                        aws_access_key_id=srv.credential.access_key_id,
                        aws_secret_access_key=srv.credential.secret_access_key,
                        config=Config(retries={"mode": "standard"}, max_pool_connections=64))


@pytest.mark.parametrize("pair", [("--simulated-launch-delay", "2.0")], indirect=True)
def test_sigkilled_owner_cluster_finishes_under_the_other(pair: list[ServerProcess]) -> None:
    a, b = pair
    c = a.client()
    arn = c.create_cluster(ClusterName="ha", InstanceGroups=seed_groups(12))["ClusterArn"]
    cid = arn.rsplit("/", 1)[-1]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and cid not in owned(a) + owned(b):
        time.sleep(0.1)
    owner, other = (a, b) if cid in owned(a) else (b, a)
    assert cid not in owned(other)
    time.sleep(1.0)  # mid-creation: some nodes launched, others not
    assert other.client().describe_cluster(ClusterName="ha")["ClusterStatus"] == "Creating"
    owner.kill9()
    killed = time.monotonic()
    while cid not in owned(other):
        assert time.monotonic() - killed < LEASE + 10, "no take-over within 10 s of the lease expiring"
        time.sleep(0.1)
    desc = wait_status(other.client(), "ha", {"InService"}, timeout=60)
    nodes = other.client().list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
    assert len(nodes) == 13 == len({n["InstanceId"] for n in nodes})
    assert sum(g["CurrentCount"] for g in desc["InstanceGroups"]) == 13
    # the restarted server (a new replica) joins; the cluster stays with one owner
    owner.start()
    time.sleep(LEASE)
    assert (cid in owned(owner)) != (cid in owned(other))


def test_clusters_spread_and_rolling_restart(pair: list[ServerProcess]) -> None:
    a, b = pair
    c = std_client(a)
    for i in range(12):
        c.create_cluster(ClusterName=f"s{i}", InstanceGroups=seed_groups(1))
    for i in range(12):
        wait_status(std_client(b), f"s{i}", {"InService"}, timeout=60)
    time.sleep(LEASE)
    oa, ob = set(owned(a)), set(owned(b))
    assert not oa & ob and len(oa | ob) == 12 and oa and ob  # every cluster once; both servers work
    # rolling restart: one server after the other; a client of the live one never fails; clusters keep converging
    errors: list[str] = []
    stop = threading.Event()

    def poll(srv: ServerProcess) -> None:
        cl = std_client(srv)
        while not stop.is_set():
            try:
                cl.describe_cluster(ClusterName="s0")
            except Exception as exc:  # noqa: BLE001 - counted
                errors.append(repr(exc))
            time.sleep(0.05)

    for restarting, live in ((a, b), (b, a)):
        t = threading.Thread(target=poll, args=(live,))
        t.start()
        std_client(live).update_cluster(ClusterName="s1", InstanceGroups=_grow(std_client(live), "s1"))
        restarting.stop()
        restarting.start()
        stop.set()
        t.join()
        stop.clear()
        wait_status(std_client(restarting), "s1", {"InService"}, timeout=60)
    assert errors == []
    final = std_client(a).describe_cluster(ClusterName="s1")
    assert sum(g["CurrentCount"] for g in final["InstanceGroups"]) == 4  # 1 + 1 + two grown compute nodes
    time.sleep(LEASE)
    oa, ob = set(owned(a)), set(owned(b))
    assert not oa & ob and len(oa | ob) == 12


def _grow(client: Any, name: str) -> list[dict[str, Any]]:
    """UpdateCluster's groups: the described ones, compute one node larger."""
    groups = []
    for g in client.describe_cluster(ClusterName=name)["InstanceGroups"]:
        spec = {k: g[k] for k in ("InstanceGroupName", "InstanceType", "ExecutionRole", "ThreadsPerCore")
                if k in g}
        spec["InstanceCount"] = g["TargetCount"] + (1 if g["InstanceGroupName"] == "compute-group" else 0)
        spec["SlurmConfig"] = g["SlurmConfig"]
        if "LifeCycleConfig" in g:
            spec["LifeCycleConfig"] = g["LifeCycleConfig"]
        groups.append(spec)
    return groups


def test_fifty_clients_against_both(pair: list[ServerProcess]) -> None:
    servers = pair
    failures: list[str] = []

    def client_run(i: int) -> None:
        try:
            cl = std_client(servers[i % 2])
            other = std_client(servers[(i + 1) % 2])
            name = f"c{i}"
            cl.create_cluster(ClusterName=name, InstanceGroups=seed_groups(1))
            wait_status(other, name, {"InService"}, timeout=120)
            cl.update_cluster(ClusterName=name, InstanceGroups=_grow(other, name))
            wait_status(cl, name, {"InService"}, timeout=120)
            if i % 2:
                other.delete_cluster(ClusterName=name)
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(f"{i}: {exc!r}")

    threads = [threading.Thread(target=client_run, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    c = servers[0].client()
    for i in range(1, 50, 2):
        wait_status(c, f"c{i}", {"gone"}, timeout=120)
    names = {s["ClusterName"] for s in c.list_clusters(MaxResults=100)["ClusterSummaries"]}
    assert names == {f"c{i}" for i in range(0, 50, 2)}
    for name in sorted(names):
        desc = c.describe_cluster(ClusterName=name)
        assert desc["ClusterStatus"] == "InService"
        nodes = c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
        assert len(nodes) == 3 == sum(g["CurrentCount"] for g in desc["InstanceGroups"])
    server_errors = [line for s in servers for line in s.log.read_text(errors="replace").splitlines()
                     if "Traceback" in line or " 500 " in line]
    assert server_errors == []
