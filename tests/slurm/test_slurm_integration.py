"""End-to-end: real munged/slurmctld/slurmd 22.05 in throwaway namespace nodes (tests/slurm/ns_cluster).

Covers HA controllers with a shared StateSaveLocation, a dynamic compute node of a hyphenated group,
a login node (copy of slurm.conf), a job, drain/resume, a graceful restart with a new partition, and
scale-in (stop slurmd, ``scontrol delete``). Needs root, iproute2, util-linux and the Debian packages.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import pytest
from ns_cluster import NsCluster

from slurmpod.slurm import control
from slurmpod.slurm.admin import SlurmControl
from slurmpod.slurm.conf import SlurmTopology, render_cgroup_conf, render_slurm_conf

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0
        or not all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "nsenter", "ip")),
        reason="needs root, iproute2 and Slurm/munge daemons",
    ),
]


@pytest.fixture
def state_dir() -> Iterator[str]:
    """A StateSaveLocation both controllers see (slurm must be able to traverse its parents)."""
    d = tempfile.mkdtemp(prefix="slurmpod-nstest-state-")
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[NsCluster]:
    c = NsCluster()
    try:
        yield c
    finally:
        c.close()


def _wait_job_done(ctl: control.CommandRunner, job_id: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = ctl.run(["squeue", "--json", "-j", job_id], timeout=10)
        jobs = json.loads(r.stdout).get("jobs", []) if r.returncode == 0 else []
        if not jobs:
            return "gone"
        if jobs[0]["job_state"] in ("COMPLETED", "FAILED", "CANCELLED"):
            return str(jobs[0]["job_state"])
        time.sleep(0.3)
    return "timeout"


def test_cluster_lifecycle(cluster: NsCluster, state_dir: str) -> None:
    ctl1, ctl2 = cluster.add_node("ip-10-239-77-10"), cluster.add_node("ip-10-239-77-11")
    c1, login = cluster.add_node("ip-10-239-77-12"), cluster.add_node("ip-10-239-77-13")
    key = os.urandom(1024)
    for n in (ctl1, ctl2, c1, login):
        control.start_munge(n.runner, key)

    topo = SlurmTopology(
        cluster_name="itest",
        controllers=((ctl1.name, ctl1.ip), (ctl2.name, ctl2.ip)),
        compute_groups=(("worker-grp-1", "compute"),),
        state_save_location=state_dir,
    )
    conf = render_slurm_conf(topo)
    control.start_slurmctld(ctl1.runner, conf, render_cgroup_conf())
    control.start_slurmctld(ctl2.runner, conf, render_cgroup_conf())
    assert control.ping(ctl2.runner) == {ctl1.name: True, ctl2.name: True}

    servers = control.conf_server_arg([ctl1.ip, ctl2.ip])
    control.start_slurmd(c1.runner, servers, 2, 1000, "worker-grp-1")
    sc = SlurmControl(ctl1.runner)
    assert sc.wait_for_nodes([c1.name], timeout=20) == {c1.name}
    node = sc.node(c1.name)
    assert node is not None and node.partitions == ("dev", "compute") and node.addr == c1.ip
    opt = c1.runner.run(["cat", "/opt/slurm/etc/slurm.conf"], timeout=10)
    assert opt.returncode == 0 and "PartitionName=compute" in opt.stdout

    control.configure_login(login.runner, conf)
    r = login.runner.run(
        ["sbatch", "-p", "compute", "-o", "/dev/null", "--parsable", "--wrap", "hostname"], timeout=20
    )
    assert r.returncode == 0, r.stderr
    assert _wait_job_done(login.runner, r.stdout.strip()) in ("COMPLETED", "gone")

    sc.drain(c1.name, "maintenance")
    node = sc.node(c1.name)
    assert node is not None and node.is_drained() and node.reason == "slurmpod: maintenance"
    sc.resume(c1.name)
    assert sc.wait_for_nodes([c1.name], timeout=10) == {c1.name}

    # partition change: graceful restart, backup first, never reconfigure
    topo2 = SlurmTopology(
        cluster_name="itest",
        controllers=topo.controllers,
        compute_groups=(("worker-grp-1", "compute"), ("worker-grp-1", "batch")),
        state_save_location=state_dir,
    )
    conf2 = render_slurm_conf(topo2)
    control.restart_slurmctld(ctl2.runner, conf2, render_cgroup_conf())
    control.restart_slurmctld(ctl1.runner, conf2, render_cgroup_conf())
    assert sc.wait_for_nodes([c1.name], timeout=20) == {c1.name}
    node = sc.node(c1.name)
    assert node is not None and set(node.partitions) == {"dev", "compute", "batch"}

    # scale-in
    sc.drain(c1.name, "scale-in")
    assert sc.wait_for_idle([c1.name], timeout=10) == {c1.name}
    assert control.stop_slurmd(c1.runner) is True
    assert sc.delete_node(c1.name) is True
    assert sc.node(c1.name) is None
    assert sc.delete_node(c1.name) is False
