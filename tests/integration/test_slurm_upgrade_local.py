"""A permitted Slurm major upgrade on real nodes: 24.11 (the trixie image) -> 26.05 (the sid image).

SchedMD's rules (https://slurm.schedmd.com/upgrades.html): slurmdbd first, then the slurmctlds, then slurmd and the
clients; from 24.11 on a daemon accepts the previous three major releases, so 24.11 -> 26.05 (25.05, 25.11, 26.05)
is one step. The test: a trixie cluster with accounting, a completed job in sacct and a job running across the
upgrade; UpdateClusterSoftware to the sid image; then

* the order: slurmdbd 26.05 started (its log) before slurmctld 26.05 (its log), the server logged the accounting
  host's Slurm 24.11 -> 26.05, and the controller group's update batch came before the login and compute groups';
* the accounting database was converted by slurmdbd 26.05 itself: its columns before and after differ (26.05 adds
  e.g. ``job_table.sluid`` and ``step_table.std_out``, drops ``assoc_table.lft/rgt``); the schema version
  (``convert_version_table``) is 16 for both releases, so slurmdbd logs no "Conversion done: success!" (it would,
  before slurmctld 26.05 started, where the version changes) and its column changes only at debug levels; sacct
  still lists the old job;
* the running job survived: slurmctld 26.05 took it over from its saved state, the 24.11 slurmd ran it to the
  end (slurmpod drains a node and waits for its jobs before replacing its root volume), never requeued;
* every node runs 26.05 (slurmd's Version in scontrol, the clients' sinfo -V), new jobs run, DescribeCluster
  names the sid image for every group and `images list` shows its Slurm 26.05.

The sid image is the store's (``defaults/sid.json``; scripts/install.sh builds it); when it is missing the test
builds it (``images build --default --suite sid``, under the store's build lock) and skips if sid cannot be
installed that day.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from slurmpod.providers.local.provider import LocalProvider
from slurmpod.slurm.accounting import SLURMDBD_LOG_FILE, STORAGE_LOC, accounting_instance_id, client_argv
from slurmpod.slurm.conf import SLURMCTLD_LOG_FILE
from tests.integration.conftest import IMAGE_STORE, in_node
from tests.serverproc import ROLE, ServerProcess, seed_groups, wait_status

pytestmark = pytest.mark.integration

CONVERTED = "Conversion done: success!"
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\]")


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", *argv], capture_output=True, text=True,
                          timeout=timeout)


def _ensure_sid() -> None:
    pointer = IMAGE_STORE / "defaults" / "sid.json"
    try:
        if (IMAGE_STORE / json.loads(pointer.read_text())["image_id"] / "rootfs").is_dir():
            return
    except (OSError, ValueError, KeyError):
        pass
    r = _cli("images", "build", "--image-store", str(IMAGE_STORE), "--default", "--store-only", "--suite", "sid",
             timeout=3000)
    if r.returncode != 0:
        pytest.skip(f"no sid image (Debian sid not installable today?): {r.stderr.strip()[-400:]}")


def _register(state: Path, suite: str) -> str:
    r = _cli("images", "register", "--state-dir", str(state), "--image-store", str(IMAGE_STORE), suite)
    if r.returncode != 0:
        pytest.skip(f"no {suite} image in the image store (scripts/install.sh builds it): {r.stderr.strip()}")
    return r.stdout.split()[1]


def _stamp(line: str) -> datetime:
    m = _STAMP.match(line)
    assert m, line
    return datetime.fromisoformat(m.group(1))


def _schema(acct: Any) -> tuple[str, set[str]]:
    """The accounting database's schema version (slurmdbd's ``convert_version_table``) and its columns."""
    sql = (f"SELECT version FROM {STORAGE_LOC}.convert_version_table;\n"
           "SELECT CONCAT(table_name, '.', column_name, ' ', column_type) FROM information_schema.columns "
           f"WHERE table_schema = '{STORAGE_LOC}';\n").encode()
    r = acct.run(client_argv(), input=sql, timeout=30)
    assert r.returncode == 0, r.stderr
    version, *columns = str(r.stdout).split("\n")
    return version.strip(), {c.strip() for c in columns if c.strip()}


def _job_state(state: Path, name: str, job: str) -> str:
    out = in_node(state, name, None, "scontrol", "show", "job", job).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "?")


def _wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_24_11_to_26_05_upgrade(local_server: ServerProcess) -> None:
    t0 = time.monotonic()
    _ensure_sid()
    state = local_server.state_dir
    trixie, sid = _register(state, "trixie"), _register(state, "sid")
    c = local_server.client()
    name = "upgrade"
    groups = seed_groups(1)
    groups.insert(1, {"InstanceGroupName": "login-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                      "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Login"}})
    for g in groups:
        g["ImageId"] = trixie
    d = c.create_cluster(ClusterName=name, InstanceGroups=groups)
    cid = d["ClusterArn"].rsplit("/", 1)[1]
    d = wait_status(c, name, {"InService", "Failed"}, timeout=240)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    assert in_node(state, name, None, "sinfo", "-V").stdout.split()[-1].startswith("24.11")
    print(f"24.11 cluster InService after {time.monotonic() - t0:.1f}s")

    # a finished job in the 24.11 accounting database, and a job that runs until the controllers are on 26.05
    r = in_node(state, name, None, "bash", "-c", "cd /home && sbatch --parsable --partition=compute --wrap=hostname")
    assert r.returncode == 0, r.stderr
    old = r.stdout.strip().split(";")[0]
    _wait(f"job {old} in sacct", lambda: "COMPLETED" in in_node(
        state, name, None, "sacct", "-n", "-X", "-P", "-j", old, "-o", "State").stdout, 60)
    r = in_node(state, name, None, "bash", "-c", "cd /home && sbatch --parsable --partition=compute "
                "--wrap='while [ ! -e /home/release ]; do sleep 1; done; echo survived'")
    long = r.stdout.strip().split(";")[0]
    _wait(f"job {long} running", lambda: _job_state(state, name, long) == "RUNNING", 30)

    acct = LocalProvider(state).runner(cid, accounting_instance_id(cid))
    schema_before, columns_before = _schema(acct)
    t1 = time.monotonic()
    c.update_cluster_software(ClusterName=name, ImageId=sid)
    ctl_iid = next(n["InstanceId"] for n in c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
                   if n["InstanceGroupName"] == "controller-group")

    def controller_on_sid() -> bool:
        node = c.describe_cluster_node(ClusterName=name, NodeId=ctl_iid)["NodeDetails"]
        if node.get("CurrentImageId") != sid or node["InstanceStatus"]["Status"] != "Running":
            return False
        return "26.05" in in_node(state, name, None, "scontrol", "version").stdout

    _wait("the controller on 26.05", controller_on_sid, 300)
    assert _job_state(state, name, long) == "RUNNING"  # slurmctld 26.05 took the job over from 24.11's state
    assert in_node(state, name, None, "touch", "/home/release").returncode == 0
    d = wait_status(c, name, {"InService"}, timeout=360)
    assert d.get("FailureMessage") is None, d.get("FailureMessage")
    assert {g["SoftwareUpdateStatus"] for g in d["InstanceGroups"]} == {"Succeeded"}
    assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {sid}
    print(f"UpdateClusterSoftware 24.11 -> 26.05 took {time.monotonic() - t1:.1f}s")

    # the job that ran across the upgrade completed normally
    _wait(f"job {long} done", lambda: _job_state(state, name, long) not in ("RUNNING", "COMPLETING"), 60)
    show = in_node(state, name, None, "scontrol", "show", "job", long).stdout
    assert "JobState=COMPLETED" in show and "Restarts=0" in show, show
    assert in_node(state, name, None, "cat", f"/home/slurm-{long}.out").stdout.strip() == "survived"

    # order: slurmdbd 26.05 started (and converted the database) before slurmctld 26.05; controllers before the rest
    dbd_log = acct.run(["cat", SLURMDBD_LOG_FILE], timeout=30).stdout.splitlines()
    print("---- slurmdbd.log ----\n" + "\n".join(dbd_log))
    schema_after, columns_after = _schema(acct)
    print(f"accounting schema version: {schema_before} (24.11) -> {schema_after} (26.05); columns added by "
          f"slurmdbd 26.05: {sorted(columns_after - columns_before)}, gone: {sorted(columns_before - columns_after)}")
    assert "COMPLETED" in in_node(state, name, None, "sacct", "-n", "-X", "-P", "-j", old, "-o", "State").stdout
    dbd_started = next(line for line in dbd_log if re.search(r"slurmdbd version 26\.05\S* started", line))
    ctl_log = in_node(state, name, None, "cat", SLURMCTLD_LOG_FILE).stdout.splitlines()
    ctl_started = next(line for line in ctl_log if re.search(r"slurmctld version 26\.05\S* started", line))
    assert _stamp(dbd_started) < _stamp(ctl_started), (dbd_started, ctl_started)
    if schema_after != schema_before:  # slurmdbd converted the 24.11 database itself, before any 26.05 slurmctld
        converted = next((line for line in dbd_log if CONVERTED in line), None)
        assert converted is not None and _stamp(converted) < _stamp(ctl_started), (converted, ctl_started)
    # slurmdbd made the 24.11 tables 26.05's itself (schema version 16 both: no "Conversion done" line; the columns
    # it adds and drops are logged only at debug levels): slurmpod runs no SQL but its slurm user's
    assert columns_after != columns_before
    events = c.list_cluster_events(ClusterName=name, SortOrder="Ascending", MaxResults=100)["Events"]
    batches = [next(g for g in ("controller", "login", "compute") if f"IG {g}-group" in e["Description"])
               for e in events if e["Description"].startswith("Next update batch selected")]
    assert batches and batches[0] == "controller" and sorted(set(batches[1:])) == ["compute", "login"], batches
    assert batches.count("controller") == 1, batches
    server_log = (state / "server.log").read_text()
    assert re.search(r"accounting host \S+: Slurm 24\.11\S* -> 26\.05", server_log)

    # every node and client is 26.05; new jobs run and are accounted
    nodes = in_node(state, name, None, "scontrol", "show", "nodes").stdout
    versions = re.findall(r"\bVersion=(\S+)", nodes)
    assert versions and all(v.startswith("26.05") for v in versions), versions
    for group in ("controller-group", "login-group", "compute-group"):
        out = in_node(state, name, group, "sinfo", "-V").stdout
        assert out.split()[-1].startswith("26.05"), (group, out)
    r = in_node(state, name, "login-group", "bash", "-c",
                "cd /home && srun --partition=compute scontrol version")
    assert r.returncode == 0 and r.stdout.split()[-1].startswith("26.05"), (r.stdout, r.stderr)
    _wait("the new job in sacct", lambda: "scontrol|COMPLETED" in in_node(
        state, name, None, "sacct", "-n", "-X", "-P", "-S", "now-10minutes", "-o", "JobName,State").stdout, 30)
    listed = _cli("images", "list", "--state-dir", str(state), "--image-store", str(IMAGE_STORE)).stdout
    assert any(line.startswith(sid) and "26.05" in line for line in listed.splitlines()), listed
    print(f"test took {time.monotonic() - t0:.1f}s")
