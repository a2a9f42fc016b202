"""The ssh provider on real Slurm: "remote machines" are namespaced hosts running Debian's sshd (tests/sshhosts.py),
registered with `slurmpod hosts add`; a real server drives them through the SageMaker API (boto3)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import _delete_all, in_node
from tests.integration.test_lifecycle_local import all_events
from tests.serverproc import ROLE, ServerProcess, free_port, wait_status
from tests.sshhosts import FakeHost, FakeHosts, sshd_available

pytestmark = pytest.mark.integration

CTL_TYPE, COMPUTE_TYPE, BAD_TYPE, LOCAL_TYPE = "ml.t3.medium", "ml.c5.xlarge", "ml.c5.2xlarge", "ml.m5.large"


def hosts_cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "hosts", *args, "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=60)


def add_host(state: Path, fh: FakeHosts, host: str, pool: str, itype: str, key: Path | None = None) -> str:
    r = hosts_cli(state, "add", f"root@{host}", "--pool", pool, "--instance-type", itype, "--key",
                  str(key or fh.key))
    assert r.returncode == 0, r.stderr
    return r.stdout


def pool_hosts(state: Path) -> list[dict[str, Any]]:
    r = hosts_cli(state, "list", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


class Env:
    def __init__(self, fh: FakeHosts, srv: ServerProcess, state: Path, hosts: list[FakeHost]) -> None:
        self.fh, self.srv, self.state, self.hosts = fh, srv, state, hosts


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("ssh")
    state = base / "server"
    state.mkdir()
    fh = FakeHosts(base)
    srv: ServerProcess | None = None
    try:
        hosts = [fh.add() for _ in range(5)]  # h0: controller pool; h1..h4: compute pool
        out = add_host(state, fh, hosts[0].ip, "ctl", CTL_TYPE)
        assert "host key ssh-ed25519 SHA256:" in out
        for h in hosts[1:]:
            add_host(state, fh, h.ip, "compute", COMPUTE_TYPE)
        # default accounting: a controller on ssh hosts cannot reach the local accounting host, so the cluster
        # runs without accounting (and says so) rather than waiting for an unreachable slurmdbd
        srv = ServerProcess(state, free_port(), "--provider", "local", "--retry-delay", "1")
        srv.start()
        yield Env(fh, srv, state, hosts)
    finally:
        try:
            if srv is not None:
                _delete_all(srv)
                srv.stop()
                log = state / "server.log"
                if log.exists():
                    print("---- server log tail ----\n" + "\n".join(log.read_text().splitlines()[-40:]))
        finally:
            from slurmpod.providers.local.cleanup import cleanup, find_leftovers

            try:
                fh.stop()
            finally:
                if find_leftovers(state):
                    cleanup(state)


def groups(compute_type: str = COMPUTE_TYPE, count: int = 3, ctl_type: str = CTL_TYPE) -> list[dict[str, Any]]:
    return [
        {"InstanceGroupName": "controller-group", "InstanceType": ctl_type, "InstanceCount": 1,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute-group", "InstanceType": compute_type, "InstanceCount": count,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}},
    ]


def nodes(c: Any, name: str) -> list[dict[str, Any]]:
    return c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]  # type: ignore[no-any-return]


def srun_hostnames(state: Path, name: str, n: int) -> list[str]:
    r = in_node(state, name, "controller-group", "timeout", "60", "srun", "-N", str(n), "--partition=compute",
                "hostname", timeout=90)
    if r.returncode != 0:
        diag = in_node(state, name, "controller-group", "bash", "-c", "sinfo -N -l; cat /etc/hosts; "
                       "tail -n 30 /var/log/slurm/slurmctld.log")
        raise AssertionError(r.stdout + r.stderr + diag.stdout + diag.stderr)
    return sorted(r.stdout.split())


def events_text(c: Any, name: str) -> str:
    """Every event of the cluster with its details (FailureMessage), as one JSON text."""
    return json.dumps([c.describe_cluster_event(ClusterName=name, EventId=e["EventId"])
                       for e in all_events(c, name)], default=str)


def assert_clean(env: Env, hosts: list[FakeHost]) -> None:
    """No daemon of ours, no file of ours, no /etc/hosts block; replaced files (munge key) restored."""
    key_md5 = hashlib.md5(Path("/etc/munge/munge.key").read_bytes()).hexdigest()  # noqa: S324
    for h in hosts:
        r = env.fh.run(h, "bash", "-c",
                       "pgrep -x munged; pgrep -x slurmd; pgrep -x slurmctld; pgrep -x slurmstepd; "
                       "ls -d /var/lib/slurmpod-node /etc/slurm/slurm.conf /etc/slurmpod /opt/ml /var/log/slurmpod "
                       "/etc/slurmpod-release-marker /root/.ssh/id_ed25519 2>/dev/null; grep -c slurmpod /etc/hosts; "
                       "md5sum < /etc/munge/munge.key")
        if r.stdout.split() != ["0", key_md5, "-"]:
            detail = env.fh.run(h, "bash", "-c", "cat /var/lib/slurmpod-node/instance "
                                "/var/lib/slurmpod-node/manifest; ls -la /var/lib/slurmpod-node").stdout
            raise AssertionError(f"{h.hostname} not clean: {r.stdout}\n{detail}")


def test_ssh_cluster_srun_update_replace_delete(env: Env, tmp_path: Path) -> None:
    c = env.srv.client()
    t0 = time.monotonic()
    c.create_cluster(ClusterName="sshc", InstanceGroups=groups())
    d = wait_status(c, "sshc", {"InService", "Failed"}, timeout=120)
    in_service = time.monotonic() - t0
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    print(f"MEASURE ssh cluster (1 controller + 3 compute) InService in {in_service:.1f} s")
    ips = {h.ip for h in env.hosts}
    before = nodes(c, "sshc")
    assert len(before) == 4
    for n in before:
        desc = c.describe_cluster_node(ClusterName="sshc", NodeId=n["InstanceId"])["NodeDetails"]
        assert desc["PrivatePrimaryIp"] in ips
    assert srun_hostnames(env.state, "sshc", 3) == sorted(h.hostname for h in env.hosts[1:4])
    listed = {h["host"]: h for h in pool_hosts(env.state)}
    assert listed[env.hosts[4].ip]["instance_id"] is None  # the spare stays free

    # rolling software update = reset of each host + baseline (the new release's setup step) + scripts
    script = tmp_path / "setup.sh"
    script.write_text("echo release-2 > /etc/slurmpod-release-marker\n"
                      "echo 'C /etc/slurmpod-release-marker' >> /var/lib/slurmpod-node/manifest\n")
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(env.state), "publish",
                        "--script", str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    new_image = r.stdout.split()[1]
    t0 = time.monotonic()
    c.update_cluster_software(ClusterName="sshc", ImageId=new_image)
    time.sleep(1)
    d = wait_status(c, "sshc", {"InService"}, timeout=240)
    deadline = time.monotonic() + 240
    while {g.get("SoftwareUpdateStatus") for g in d["InstanceGroups"]} != {"Succeeded"}:
        assert time.monotonic() < deadline, d["InstanceGroups"]
        time.sleep(1)
        d = c.describe_cluster(ClusterName="sshc")
    print(f"MEASURE rolling update of 4 ssh nodes in {time.monotonic() - t0:.1f} s")
    assert {n["InstanceId"] for n in nodes(c, "sshc")} == {n["InstanceId"] for n in before}
    for h in env.hosts[:4]:
        assert env.fh.run(h, "cat", "/etc/slurmpod-release-marker").stdout.strip() == "release-2"
    assert srun_hostnames(env.state, "sshc", 3) == sorted(h.hostname for h in env.hosts[1:4])

    # replace one compute node: a new instance on a free host of the pool
    victim = next(n for n in nodes(c, "sshc") if n["InstanceGroupName"] == "compute-group")
    t0 = time.monotonic()
    res = c.batch_replace_cluster_nodes(ClusterName="sshc", NodeIds=[victim["InstanceId"]])
    assert res.get("Failed", []) == [], res
    deadline = time.monotonic() + 180
    while True:
        now = nodes(c, "sshc")
        running = [n for n in now if n["InstanceGroupName"] == "compute-group"
                   and n["InstanceStatus"]["Status"] == "Running"]
        if len(running) == 3 and victim["InstanceId"] not in {n["InstanceId"] for n in now}:
            break
        assert time.monotonic() < deadline, now
        time.sleep(1)
    print(f"MEASURE node replacement on ssh hosts in {time.monotonic() - t0:.1f} s")
    assert len(srun_hostnames(env.state, "sshc", 3)) == 3

    t0 = time.monotonic()
    c.delete_cluster(ClusterName="sshc")
    wait_status(c, "sshc", {"gone"}, timeout=120)
    print(f"MEASURE delete of the ssh cluster in {time.monotonic() - t0:.1f} s")
    assert all(h["instance_id"] is None for h in pool_hosts(env.state))
    assert_clean(env, env.hosts)


def test_bad_hosts_are_set_aside_and_instances_retried_elsewhere(env: Env) -> None:
    fh, state = env.fh, env.state
    wrong_key = fh.add(authorized=fh.other_key)  # accepts another key than ours
    changed = fh.add()
    missing = fh.add(without=("slurmd",))
    r = hosts_cli(state, "add", f"root@{fh.unused_ip()}", "--pool", "mixed", "--instance-type", BAD_TYPE,
                  "--key", str(fh.key), "--no-contact")
    assert r.returncode == 0, r.stderr
    r = hosts_cli(state, "add", f"root@{wrong_key.ip}", "--pool", "mixed", "--instance-type", BAD_TYPE,
                  "--key", str(fh.key))
    assert r.returncode != 0 and "refused our key" in r.stderr  # add itself says so
    hosts_cli(state, "add", f"root@{wrong_key.ip}", "--pool", "mixed", "--instance-type", BAD_TYPE,
              "--key", str(fh.key), "--no-contact")
    add_host(state, fh, changed.ip, "mixed", BAD_TYPE)
    fh.new_host_key(changed)  # "reinstalled" after its key was pinned
    add_host(state, fh, missing.ip, "mixed", BAD_TYPE)
    for h in env.hosts[3:5]:  # two good hosts move from the compute pool (free again) to this one
        assert hosts_cli(state, "remove", h.ip).returncode == 0
        add_host(state, fh, h.ip, "mixed", BAD_TYPE)

    c = env.srv.client()
    c.create_cluster(ClusterName="sshbad", NodeProvisioningMode="Continuous", InstanceGroups=groups(BAD_TYPE, 2))
    deadline = time.monotonic() + 150
    while True:
        running = [n for n in nodes(c, "sshbad") if n["InstanceGroupName"] == "compute-group"
                   and n["InstanceStatus"]["Status"] == "Running"]
        if len(running) == 2:
            break
        assert time.monotonic() < deadline, nodes(c, "sshbad")
        time.sleep(1)
    text = events_text(c, "sshbad")
    for expected in ("is unreachable over SSH", "refused our key", "different SSH host key", "lacks slurmd",
                     "retried on another host"):
        assert expected in text, f"no event says {expected!r}"
    used = {c.describe_cluster_node(ClusterName="sshbad", NodeId=n["InstanceId"])["NodeDetails"]["PrivatePrimaryIp"]
            for n in running}
    assert used == {env.hosts[3].ip, env.hosts[4].ip}
    listed = {h["host"]: h for h in pool_hosts(state)}
    assert listed[changed.ip]["quarantine_until"] is None  # out of service until an operator acts
    assert "lacks slurmd" in listed[missing.ip]["last_error"]
    c.delete_cluster(ClusterName="sshbad")
    wait_status(c, "sshbad", {"gone"}, timeout=120)
    assert_clean(env, [env.hosts[0], env.hosts[3], env.hosts[4], wrong_key, changed, missing])


def test_mixed_local_controller_unroutable_is_reported(env: Env) -> None:
    """A local controller and ssh compute nodes: this machine does not forward, so the launch says why."""
    c = env.srv.client()
    c.create_cluster(ClusterName="sshmix", NodeProvisioningMode="Continuous",
                     InstanceGroups=groups(COMPUTE_TYPE, 1, ctl_type=LOCAL_TYPE))
    deadline = time.monotonic() + 90
    while "cannot reach" not in events_text(c, "sshmix"):
        assert time.monotonic() < deadline, "no event about the unroutable mixed cluster"
        time.sleep(1)
    text = events_text(c, "sshmix")
    assert "needs routed networks" in text
    c.delete_cluster(ClusterName="sshmix")
    wait_status(c, "sshmix", {"gone"}, timeout=120)
    assert all(h["instance_id"] is None for h in pool_hosts(env.state))
    assert_clean(env, env.hosts[1:3])
