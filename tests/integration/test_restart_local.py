"""kill -9 of the server on the local provider: nodes outlive the server and are re-adopted on restart.

* While a cluster runs: same instance ids, hostnames, IPs and LaunchTime; holders (and so the nodes'
  processes, files and running jobs) are untouched; a new job runs.
* In the middle of CreateCluster (twice: while the controller boots, then while the compute nodes join):
  the restarted server converges to exactly the requested instances, with no duplicate namespaces,
  and a job runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import seed_groups, wait_status

pytestmark = pytest.mark.integration


# ---- helpers ---------------------------------------------------------------------------------------


def on_node(state: Path, cluster_id: str, group: str, instance_id: str, *argv: str,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs a command inside one specific node via ``slurmpod connect <target>`` (no server needed)."""
    target = f"sagemaker-cluster:{cluster_id}_{group}-{instance_id}"
    cmd = [sys.executable, "-m", "slurmpod.cli", "connect", target, "--state-dir", str(state), "--", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)  # noqa: S603


def restart(srv: Any, timeout: float = 20) -> Any:
    """``srv.start()`` and wait until the new server answers API calls; returns a fresh client.

    ``ServerProcess.start`` only waits for the TCP port; a request right after it was seen to be refused
    (rarely), so this also waits for an answer and prints what held the port when that happens.
    """
    from botocore.exceptions import EndpointConnectionError

    t0 = time.monotonic()
    srv.start()
    started = time.monotonic() - t0
    c = srv.client()
    first = True
    while True:
        try:
            c.list_clusters()
            return c
        except EndpointConnectionError:
            if first:
                first = False
                ss = subprocess.run(["ss", "-tanp", f"( sport = :{srv.port} or dport = :{srv.port} )"],
                                    capture_output=True, text=True, timeout=10).stdout
                print(f"NOTE: port {srv.port} accepted after {started:.2f}s but the server refused the first "
                      f"request (new server pid {srv.proc.pid}); sockets on the port:\n{ss}")
            if time.monotonic() - t0 > timeout:
                raise
            time.sleep(0.05)


def node_details(client: Any, name: str) -> dict[str, dict[str, Any]]:
    nodes = client.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
    return {n["InstanceId"]: client.describe_cluster_node(ClusterName=name, NodeId=n["InstanceId"])["NodeDetails"]
            for n in nodes}


def identity(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["InstanceId"], d["InstanceGroupName"], d["NodeLogicalId"], d["PrivateDnsHostname"],
            d["PrivatePrimaryIp"], d["LaunchTime"])


def holder_of(state: Path, cluster_id: str, instance_id: str) -> tuple[int, str, int]:
    """(holder pid, holder start time, boot count) from the local provider's instance record."""
    meta = json.loads((state / "local" / "clusters" / cluster_id / "instances" / instance_id / "meta.json")
                      .read_text())
    return meta["holder_pid"], meta["holder_start"], meta["boots"]


def cluster_netns(cluster_id: str) -> list[str]:
    """The cluster's node namespaces (not its accounting service host)."""
    from slurmpod.slurm.accounting import accounting_instance_id

    service = f"sp-{cluster_id}-{accounting_instance_id(cluster_id)[-8:]}"
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return [line.split()[0] for line in out.splitlines() if cluster_id in line and line.split()[0] != service]


def job_state(state: Path, name: str, job: str) -> str:
    r = in_node(state, name, None, "squeue", "-h", "-j", job, "-o", "%T")
    return r.stdout.strip()


def run_job(state: Path, name: str, compute_hosts: set[str], timeout: float = 30) -> str:
    """Submits a short job to the compute partition and returns its output (the node's hostname)."""
    r = in_node(state, name, None, "bash", "-c",
                "cd /home && sbatch --parsable --partition=compute --wrap='hostname'")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = in_node(state, name, None, "cat", f"/home/slurm-{job}.out")
        if res.returncode == 0 and res.stdout.strip() and not job_state(state, name, job):
            out = res.stdout.strip()
            assert out in compute_hosts, f"job output {out!r} not one of {compute_hosts}"
            return out
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not complete; squeue: {job_state(state, name, job)!r}")


# ---- tests -----------------------------------------------------------------------------------------


def test_kill9_while_running_readopts_the_same_nodes(local_server):
    state = local_server.state_dir
    c = local_server.client()
    name = "restart-cluster"
    arn = c.create_cluster(ClusterName=name, InstanceGroups=seed_groups(2))["ClusterArn"]
    cluster_id = arn.rsplit("/", 1)[1]
    d = wait_status(c, name, {"InService", "Failed"}, timeout=50)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    before = node_details(c, name)
    assert len(before) == 3
    holders = {iid: holder_of(state, cluster_id, iid) for iid in before}
    compute = {d["PrivateDnsHostname"] for d in before.values() if d["InstanceGroupName"] == "compute-group"}

    # a file in each node's root volume, and a long job running on a compute node
    for iid, nd in before.items():
        r = on_node(state, cluster_id, nd["InstanceGroupName"], iid, "bash", "-c",
                    f"echo {iid} > /root/before-kill")
        assert r.returncode == 0, r.stderr
    r = in_node(state, name, None, "bash", "-c",
                "cd /home && sbatch --parsable --partition=compute --wrap='sleep 600'")
    assert r.returncode == 0, r.stderr
    sleeper = r.stdout.strip()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and job_state(state, name, sleeper) != "RUNNING":
        time.sleep(0.2)
    assert job_state(state, name, sleeper) == "RUNNING"

    t0 = time.monotonic()
    local_server.kill9()
    # the nodes do not depend on the server: still up, job still running, while it is dead
    assert job_state(state, name, sleeper) == "RUNNING"
    c = restart(local_server)
    print(f"server back after {time.monotonic() - t0:.2f}s")
    d = wait_status(c, name, {"InService"}, timeout=20)
    time.sleep(2.0)  # let the restarted reconciler run several passes over the re-adopted cluster

    after = node_details(c, name)
    assert {iid: identity(x) for iid, x in after.items()} == {iid: identity(x) for iid, x in before.items()}
    assert all(x["InstanceStatus"]["Status"] == "Running" for x in after.values()), after
    assert c.describe_cluster(ClusterName=name)["ClusterStatus"] == "InService"
    assert {iid: holder_of(state, cluster_id, iid) for iid in after} == holders, "a node was rebooted"
    assert len(cluster_netns(cluster_id)) == 3
    for iid, nd in after.items():
        r = on_node(state, cluster_id, nd["InstanceGroupName"], iid, "cat", "/root/before-kill")
        assert r.returncode == 0 and r.stdout.strip() == iid, (r.stdout, r.stderr)
    assert job_state(state, name, sleeper) == "RUNNING", "the job started before the kill was lost"

    out = run_job(state, name, compute)
    print(f"new job ran on {out}")
    in_node(state, name, None, "scancel", sleeper)


@pytest.mark.parametrize(("first_kill", "second_kill"), [(0.1, 0.05), (0.25, 0.15), (0.4, 0.3)])
def test_kill9_during_create_converges(local_server, first_kill, second_kill):
    state = local_server.state_dir
    c = local_server.client()
    name = "crash-create"
    arn = c.create_cluster(ClusterName=name, InstanceGroups=seed_groups(2))["ClusterArn"]
    cluster_id = arn.rsplit("/", 1)[1]
    kills: list[str] = []

    def kill_and_restart(label: str) -> Any:
        st = c.describe_cluster(ClusterName=name)["ClusterStatus"]
        nodes = c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
        kills.append(f"{label}: {st} [" + ", ".join(
            f"{n['InstanceGroupName']}={n['InstanceStatus']['Status']}" for n in nodes) + "]")
        local_server.kill9()
        return restart(local_server)

    # 1st kill: early in the creation (nodes launching / booting)
    time.sleep(first_kill)
    c = kill_and_restart(f"create+{first_kill}s")
    # 2nd kill: right after the restarted server resumed the boots
    time.sleep(second_kill)
    c = kill_and_restart(f"restart+{second_kill}s")
    print("killed at: " + " | ".join(kills))
    assert kills[0].split(": ")[1].startswith("Creating"), kills

    d = wait_status(c, name, {"InService", "Failed"}, timeout=50)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    details = node_details(c, name)
    groups = sorted(x["InstanceGroupName"] for x in details.values())
    assert groups == ["compute-group", "compute-group", "controller-group"], groups
    assert all(x["InstanceStatus"]["Status"] == "Running" for x in details.values()), details
    assert sorted(cluster_netns(cluster_id)) == sorted(
        f"sp-{cluster_id}-{iid[-8:]}" for iid in details), cluster_netns(cluster_id)
    inst_dir = state / "local" / "clusters" / cluster_id / "instances"
    from slurmpod.slurm.accounting import accounting_instance_id

    service = accounting_instance_id(cluster_id)  # the accounting host is the cluster's, not a node
    assert sorted(p.name for p in inst_dir.iterdir() if p.name != service) == sorted(details)
    net = json.loads((state / "local" / "clusters" / cluster_id / "network.json").read_text())
    assert sorted(ip for ip in net["ips"] if ip != service) == sorted(details)

    # Slurm sees exactly the two compute nodes, idle, and a job runs
    compute = {x["PrivateDnsHostname"] for x in details.values() if x["InstanceGroupName"] == "compute-group"}
    r = in_node(state, name, None, "sinfo", "-h", "-N", "-o", "%N %t")
    assert r.returncode == 0, r.stderr
    slurm_nodes = {line.split()[0] for line in r.stdout.splitlines()}
    assert slurm_nodes == compute, r.stdout
    assert {line.split()[1] for line in r.stdout.splitlines()} == {"idle"}, r.stdout
    out = run_job(state, name, compute)
    print(f"job ran on {out}")
    # one package proxy and one registry for the cluster's bridge, however often the server died starting them
    from slurmpod.providers.local.pkgproxy import PackageProxy
    from slurmpod.providers.local.registry import ContainerRegistry

    bridge_ip = net["subnet"].rsplit(".", 1)[0] + ".1"
    registries = ContainerRegistry(state).status()
    assert [ip for ip, _ in registries] == [bridge_ip], registries
    assert PackageProxy(state).status()[0] > 0
    ss = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
    listening = [line for line in ss.splitlines() if f" {bridge_ip}:" in line]
    assert len(listening) == 2 and sum("docker-registry" in x for x in listening) == 1, listening
