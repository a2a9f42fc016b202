"""Two ``slurmpod server`` processes on one machine, one PostgreSQL and one local-provider state dir (real systemd
nodes, real Slurm): the owner of a cluster being created is SIGKILLed, the other server takes it over and finishes
it; no instance is launched twice, the nodes the dead server launched answer instance metadata again (their IMDS
listeners died with it), Slurm runs jobs on them, and after DeleteCluster nothing of the cluster is left on the
host. Issue 18."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.serverproc import ServerProcess, free_port, seed_groups, wait_status

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

LEASE = 3.0


@pytest.fixture
def local_pair(local_state: Path, fresh_pg_url: str) -> Iterator[list[ServerProcess]]:
    servers = [ServerProcess(local_state, free_port(), "--provider", "local", "--db", fresh_pg_url, "--accounting",
                             "none", "--lease-seconds", str(LEASE), "--replica-id", f"r{i}") for i in (1, 2)]
    try:
        for s in servers:
            s.start()
        yield servers
    finally:
        live = [s for s in servers if s.proc is not None and s.proc.poll() is None]
        if live:  # whatever a failed test left: deleted by a live server, then the servers stopped
            c = live[0].client()
            for name in [x["ClusterName"] for x in c.list_clusters()["ClusterSummaries"]]:
                c.delete_cluster(ClusterName=name)
            deadline = time.monotonic() + 90
            while c.list_clusters()["ClusterSummaries"] and time.monotonic() < deadline:
                time.sleep(0.5)
        for s in servers:
            s.stop()
        log = local_state / "server.log"
        if log.exists():
            print("---- server log tail ----\n" + "\n".join(log.read_text().splitlines()[-60:]))


def _owned(srv: ServerProcess) -> list[str]:
    return list(requests.get(f"{srv.endpoint}/readyz", timeout=5).json().get("ownedClusters", []))


def test_sigkilled_owner_of_a_local_cluster_is_taken_over(local_pair: list[ServerProcess]) -> None:
    from slurmpod.providers.local.cleanup import find_leftovers
    from slurmpod.providers.local.provider import LocalProvider

    a, b = local_pair
    state = a.state_dir
    arn = a.client().create_cluster(ClusterName="lha", InstanceGroups=seed_groups(2))["ClusterArn"]
    cid = arn.rsplit("/", 1)[-1]
    deadline = time.monotonic() + 20
    while cid not in _owned(a) + _owned(b):
        assert time.monotonic() < deadline, "nobody took the new cluster"
        time.sleep(0.1)
    owner, other = (a, b) if cid in _owned(a) else (b, a)
    # mid-creation: at least one instance launched by the owner, the cluster not InService yet
    deadline = time.monotonic() + 60
    while not any(i.alive for i in LocalProvider(state).list_instances(cid)):
        assert time.monotonic() < deadline, "no instance launched"
        time.sleep(0.1)
    assert other.client().describe_cluster(ClusterName="lha")["ClusterStatus"] == "Creating"
    launched_by_owner = {i.instance_id for i in LocalProvider(state).list_instances(cid)}
    owner.kill9()
    killed = time.monotonic()
    while cid not in _owned(other):
        assert time.monotonic() - killed < LEASE + 10, "no take-over within 10 s of the lease expiring"
        time.sleep(0.1)
    print(f"\ntake-over {time.monotonic() - killed:.1f} s after SIGKILL (lease {LEASE:.0f} s)")
    c = other.client()
    d = wait_status(c, "lha", {"InService", "Failed"}, timeout=240)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")

    nodes = c.list_cluster_nodes(ClusterName="lha")["ClusterNodeSummaries"]
    ids = {n["InstanceId"] for n in nodes}
    assert len(nodes) == 3 == len(ids)
    instances = LocalProvider(state).list_instances(cid)
    assert sorted(i.instance_id for i in instances if i.alive) == sorted(ids)  # nothing launched twice
    assert launched_by_owner & ids, "the dead server's instances were not adopted"
    # a node the dead server launched answers instance metadata (IMDSv2) again, from the new owner
    imds = ("t=$(curl -s -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://169.254.169.254/latest/api/token)"
            " && curl -s -H \"X-aws-ec2-metadata-token: $t\" http://169.254.169.254/latest/meta-data/instance-id")
    provider = LocalProvider(state)
    for node in nodes:
        if node["InstanceId"] in launched_by_owner:
            r = provider.runner(cid, node["InstanceId"]).run(["sh", "-c", imds], timeout=60)
            assert r.stdout.strip() == node["InstanceId"], (r.stdout, r.stderr)
    compute = next(n["InstanceId"] for n in nodes if n["InstanceGroupName"] == "compute-group")
    r = provider.runner(cid, compute).run(["bash", "-c", "srun -N2 hostname | sort -u | wc -l"], timeout=90)
    assert r.returncode == 0 and r.stdout.strip() == "2", (r.stdout, r.stderr)

    c.delete_cluster(ClusterName="lha")
    wait_status(c, "lha", {"gone"}, timeout=120)
    left = [line for line in find_leftovers(state) if cid in line]
    assert left == [], left
