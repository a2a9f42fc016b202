"""Software updates on real Slurm: root-volume replacement keeps identity, never kills jobs, keeps the
controller's queue, and rolls in batches."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import seed_groups, wait_status

pytestmark = pytest.mark.integration


def _publish(state, tmp_path) -> str:
    script = tmp_path / "setup.sh"
    script.write_text("echo release-2 > /etc/slurmpod-release-marker\n")
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(state), "publish",
                        "--script", str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[1]


def _job_state(state, name, job) -> str:
    out = in_node(state, name, None, "scontrol", "show", "job", job).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "?")


def test_update_keeps_identity_and_running_job(local_server, tmp_path):
    state = local_server.state_dir
    c = local_server.client()
    c.create_cluster(ClusterName="upd", InstanceGroups=seed_groups(2))
    d = wait_status(c, "upd", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    before = {n["InstanceId"]: n for n in c.list_cluster_nodes(ClusterName="upd")["ClusterNodeSummaries"]}
    for n in before.values():  # a marker in every old root volume
        assert in_node(state, "upd", n["InstanceGroupName"], "true").returncode == 0
    for host in [n["PrivateDnsHostname"] for n in before.values() if n["InstanceGroupName"] == "compute-group"]:
        r = in_node(state, "upd", None, "bash", "-c", f"srun -w {host} touch /root/old-root-marker")
        assert r.returncode == 0, r.stderr
    r = in_node(state, "upd", None, "bash", "-c",
                "cd /home && sbatch --parsable --partition=compute -N1 --wrap='sleep 6; echo done'")
    job = r.stdout.strip()
    deadline = time.monotonic() + 30
    while _job_state(state, "upd", job) != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # a queued job (held) must survive the controller's root-volume replacement
    held = in_node(state, "upd", None, "bash", "-c", "cd /home && sbatch --parsable --hold --wrap=true").stdout.strip()

    new = _publish(state, tmp_path)
    c.update_cluster_software(ClusterName="upd", ImageId=new)
    d = wait_status(c, "upd", {"InService"}, timeout=240)
    assert d.get("FailureMessage") is None, d.get("FailureMessage")
    assert {g["SoftwareUpdateStatus"] for g in d["InstanceGroups"]} == {"Succeeded"}

    # the running job was not killed: it completed normally, never requeued
    deadline = time.monotonic() + 60
    while _job_state(state, "upd", job) not in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    show = in_node(state, "upd", None, "scontrol", "show", "job", job).stdout
    assert "JobState=COMPLETED" in show and "Restarts=0" in show, show
    assert in_node(state, "upd", None, "cat", f"/home/slurm-{job}.out").stdout.strip() == "done"
    assert _job_state(state, "upd", held) == "PENDING"

    after = {n["InstanceId"]: n for n in c.list_cluster_nodes(ClusterName="upd")["ClusterNodeSummaries"]}
    assert after.keys() == before.keys()
    for iid, n in after.items():
        assert n["LaunchTime"] == before[iid]["LaunchTime"]
        assert n["PrivateDnsHostname"] == before[iid]["PrivateDnsHostname"]
        assert n["ImageVersionStatus"] == "UpToDate"
        assert n["LastSoftwareUpdateTime"] > n["LaunchTime"]
        assert c.describe_cluster_node(ClusterName="upd", NodeId=iid)["NodeDetails"]["CurrentImageId"] == new
    for n in after.values():
        if n["InstanceGroupName"] != "compute-group":
            continue
        r = in_node(state, "upd", None, "bash", "-c",
                    f"srun -w {n['PrivateDnsHostname']} bash -c "
                    "'test ! -e /root/old-root-marker && cat /etc/slurmpod-release-marker'")
        assert r.stdout.strip() == "release-2", (r.stdout, r.stderr)
    info = in_node(state, "upd", None, "sinfo", "-h", "-o", "%P %D %t").stdout
    assert "compute 2 idle" in info, info
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName="upd", MaxResults=100)["Events"]]
    assert sum(t.startswith("Root volume replacement started for Instance") for t in texts) == 3


def test_rolling_batches_of_two(local_server, tmp_path):
    state = local_server.state_dir
    c = local_server.client()
    c.create_cluster(ClusterName="roll", InstanceGroups=seed_groups(4))
    d = wait_status(c, "roll", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    new = _publish(state, tmp_path)
    most = [0]
    stop = threading.Event()
    from slurmpod.providers.local.provider import LocalProvider

    ctl = next(n for n in c.list_cluster_nodes(ClusterName="roll")["ClusterNodeSummaries"]
               if n["InstanceGroupName"] == "controller-group")
    # in-process nsenter: a sample costs milliseconds (a CLI start per sample could miss a 1.5 s update)
    runner = LocalProvider(state).runner(d["ClusterArn"].rsplit("/", 1)[1], ctl["InstanceId"])

    def watch() -> None:
        while not stop.is_set():
            out = runner.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30).stdout
            states = dict(line.split() for line in out.splitlines())  # a node is listed once per partition
            drained = sum(1 for st in states.values() if st.startswith(("drain", "drng", "down")))
            most[0] = max(most[0], drained)
            time.sleep(0.1)

    t = threading.Thread(target=watch)
    t.start()
    try:
        c.update_cluster_software(ClusterName="roll", ImageId=new,
                                  InstanceGroups=[{"InstanceGroupName": "compute-group"}],
                                  DeploymentConfig={"RollingUpdatePolicy": {
                                      "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 2}}})
        d = wait_status(c, "roll", {"InService"}, timeout=240)
    finally:
        stop.set()
        t.join(timeout=30)
    assert d.get("FailureMessage") is None
    assert 1 <= most[0] <= 2, most[0]
    texts = [e["Description"] for e in
             c.list_cluster_events(ClusterName="roll", SortOrder="Ascending", MaxResults=100)["Events"]]
    batches = [i for i, t in enumerate(texts) if t.startswith("Next update batch selected for IG compute-group")]
    assert len(batches) == 2
