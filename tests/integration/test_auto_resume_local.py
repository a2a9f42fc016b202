"""Job auto-resume, the health agent and fault injection on real Slurm (local ``ml.p5.48xlarge`` nodes).

One cluster (a controller, two p5 compute nodes with 8 emulated GPUs each, accounting on) runs three 2-node jobs
whose tasks checkpoint to the shared /fsx every second and resume from their checkpoint:

1. ``srun --auto-resume=1`` without GRES, ``slurmpod faults inject ... gpu-xid`` on the node that is not the batch
   host: the node's health agent marks it ``Action:Replace``, slurmpod replaces it (new InstanceId, same hostname),
   the job is shrunk and re-expanded and the step runs again in the same JobID from its checkpoint: COMPLETED;
2. the same job without the flag: FAILED;
3. ``--gres=gpu:8`` with the flag: the job is requeued (Slurm cannot expand GRES jobs), restarts with the same
   JobID once the node is replaced, resumes from its checkpoint: COMPLETED.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import default_image, in_node, running_server
from tests.serverproc import ROLE, ServerProcess, wait_status

pytestmark = pytest.mark.integration

CLUSTER = "resume"
DIR = "/fsx/ar"
APP = f"""import os, socket, sys, time
steps = int(sys.argv[1])
path = "{DIR}/%s/ckpt.%s" % (os.environ["SLURM_JOB_ID"], os.environ["SLURM_PROCID"])
try:
    i = int(open(path).read())
except (OSError, ValueError):
    i = 0
print("task %s on %s step %s resumes at %d" % (os.environ["SLURM_PROCID"], socket.gethostname(),
                                               os.environ["SLURM_STEP_ID"], i), flush=True)
release = "{DIR}/%s/release" % os.environ["SLURM_JOB_ID"]
while i < steps or not os.path.exists(release):  # the test releases the job once its fault is injected
    time.sleep(1)
    if i < steps:
        i += 1
        with open(path + ".tmp", "w") as f:
            f.write(str(i))
        os.replace(path + ".tmp", path)
print("task %s done" % os.environ["SLURM_PROCID"], flush=True)
"""


def _groups() -> list[dict[str, Any]]:
    return [{"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
             "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
            {"InstanceGroupName": "gpu-group", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2,
             "ThreadsPerCore": 1, "ExecutionRole": ROLE,
             "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["gpu"]}}]


@pytest.fixture
def server(local_state: Path) -> Iterator[ServerProcess]:
    if default_image() is None:
        pytest.skip("no default image in the image store (scripts/install.sh builds it)")
    with running_server(local_state) as srv:
        yield srv


def _sh(state: Path, script: str, timeout: float = 90) -> str:
    r = in_node(state, CLUSTER, None, "bash", "-c", script, timeout=timeout)
    assert r.returncode == 0, (script, r.stdout, r.stderr)
    return str(r.stdout).strip()


def _faults(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "faults", *args, "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=120)


def _submit(state: Path, name: str, srun_flags: str, sbatch_flags: str = "", steps: int = 12) -> str:
    script = (f"#!/bin/bash\n#SBATCH -N2 -p gpu -J {name} -o {DIR}/%j.out --open-mode=append {sbatch_flags}\n"
              f"mkdir -p {DIR}/$SLURM_JOB_ID\n"
              f"srun {srun_flags} -N2 --ntasks-per-node=1 python3 {DIR}/app.py {steps}\n")
    out = _sh(state, f"mkdir -p {DIR} && cat > {DIR}/{name}.sh <<'EOF'\n{script}EOF\n"
                     f"cd {DIR} && sbatch --parsable {name}.sh")
    return out.splitlines()[-1].strip()


def _job(state: Path, job: str) -> dict[str, str]:
    line = _sh(state, f"scontrol -o show job {job}")
    return dict(t.split("=", 1) for t in line.split() if "=" in t)


def _wait_running(state: Path, job: str, timeout: float = 240) -> None:
    """The job's tasks run: a job submitted right after a replacement waits (PENDING) until the new node has
    registered with slurmctld, which under load takes most of a minute."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _job(state, job).get("JobState") == "RUNNING":
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job} never ran: {_sh(state, f'scontrol show job {job}; sinfo -N')}")


def _wait_checkpoints(state: Path, job: str, at_least: int = 2, timeout: float = 60) -> None:
    _wait_running(state, job)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = _sh(state, f"for f in {DIR}/{job}/ckpt.0 {DIR}/{job}/ckpt.1; do cat $f 2>/dev/null; echo; done"
                  ).split()
        if len(got) == 2 and min(int(x) for x in got) >= at_least:
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job} never checkpointed: {_sh(state, f'cat {DIR}/{job}.out || true')}\n"
                         f"{_sh(state, f'ls -la {DIR}/{job}; scontrol show job {job}; sinfo -N')}")


def _wait_done(state: Path, job: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = _sh(state, f"sacct -n -X -j {job} -o State%20 | tail -1").strip()
        if st and st not in ("RUNNING", "PENDING", "REQUEUED", "RESIZING", "COMPLETING"):
            return st
        time.sleep(1)
    raise AssertionError(f"job {job} did not end: {_sh(state, f'cat {DIR}/{job}.out; squeue; sinfo -N')}")


def _gpu_nodes(c: Any) -> dict[str, str]:
    nodes = c.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]
    return {n["InstanceId"]: n["InstanceStatus"]["Status"] for n in nodes if n["InstanceGroupName"] == "gpu-group"}


def _wait_replaced(c: Any, old: str, others: set[str], timeout: float = 120) -> str:
    """The successor of ``old``: the one compute node that is neither ``old`` nor one of ``others`` (the nodes
    there when the fault was injected, which keep their ids), once both run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = _gpu_nodes(c)
        new = set(nodes) - others - {old}
        if old not in nodes and len(nodes) == 2 and len(new) == 1 and set(nodes.values()) == {"Running"}:
            return new.pop()
        time.sleep(0.5)
    raise AssertionError(f"{old} was not replaced: {_gpu_nodes(c)}")


def _instance_of(c: Any, host: str) -> str:
    for n in c.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]:
        d = c.describe_cluster_node(ClusterName=CLUSTER, NodeId=n["InstanceId"])["NodeDetails"]
        if d.get("PrivateDnsHostname") == host:
            return str(n["InstanceId"])
    raise AssertionError(f"no instance has hostname {host}")


def _inject_on_other_node(state: Path, c: Any, job: str) -> tuple[str, str, set[str]]:
    info = _job(state, job)
    nodes = _sh(state, f"scontrol show hostnames {info['NodeList']}").split()
    victim = next(n for n in nodes if n != info["BatchHost"])
    iid = _instance_of(c, victim)
    others = set(_gpu_nodes(c)) - {iid}
    r = _faults(state, "inject", CLUSTER, "--node", victim, "gpu-xid")
    assert r.returncode == 0, r.stderr
    assert f"gpu-xid injected into {iid} ({victim})" in r.stdout
    # the job may end only now (under load its 12 one-second steps were over before the fault came)
    _sh(state, f"touch {DIR}/{job}/release")
    return victim, iid, others


def test_auto_resume_survives_a_gpu_fault(server: ServerProcess) -> None:
    state, c = server.state_dir, server.client()
    c.create_cluster(ClusterName=CLUSTER, InstanceGroups=_groups())
    d = wait_status(c, CLUSTER, {"InService", "Failed"}, timeout=240)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    _sh(state, f"mkdir -p {DIR} && cat > {DIR}/app.py <<'EOF'\n{APP}EOF")
    # srun only, as on HyperPod: sbatch refuses the flag
    r = in_node(state, CLUSTER, None, "sbatch", "--auto-resume=1", "--wrap", "true")
    assert r.returncode != 0 and "unrecognized option '--auto-resume=1'" in r.stderr, r.stderr
    agent = json.loads(in_node(state, CLUSTER, "gpu-group", "cat", "/run/slurmpod/health.json").stdout)
    assert agent["armed"] and {x["name"] for x in agent["results"]} >= {"gpu", "slurmd", "munged"}

    # 1. no GRES: shrink, replace, expand, same JobID, from the checkpoint
    job = _submit(state, "resume", "--auto-resume=1")
    _wait_checkpoints(state, job)
    victim, old, others = _inject_on_other_node(state, c, job)
    assert _wait_done(state, job) == "COMPLETED", _sh(state, f"cat {DIR}/{job}.out")
    new = _wait_replaced(c, old, others)
    out = _sh(state, f"cat {DIR}/{job}.out")
    for line in (f"[Auto Resume] Info: JobID: {job} StepID: 0 TaskID: 1 process_task_init",
                 "[Auto Resume] Info: Initiating communication with cluster agent to diagnose health of nodes",
                 f"[Auto Resume] Info: Response from cluster agent: JobId={job}, ResumeAction=RETRYSTEP",
                 f"[Auto Resume] Info: Node {victim} is unhealthy: Action:Replace",
                 "[Auto Resume] Info: Job failed - replacing nodes",
                 "[Auto Resume] Info: Job Expansion complete",
                 "[Auto Resume] Info: Retrying step. Attempt number: 1",
                 f"[Auto Resume] Info: JobID: {job} StepID: 1 TaskID: 1 process_task_init"):
        assert line in out, out
    resumed = [ln for ln in out.splitlines() if f"on {victim} step 1 resumes at" in ln]
    assert resumed and int(resumed[0].rsplit(" ", 1)[1]) >= 2, out  # from its checkpoint, not from 0
    assert _instance_of(c, victim) == new != old  # the same hostname, a new instance
    steps = _sh(state, f"sacct -n -j {job} -o JobID%15,State%12")
    assert f"{job}.1" in steps and "COMPLETED" in steps, steps
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName=CLUSTER, MaxResults=100)["Events"]]
    assert any(f"Fault gpu-xid injected into instance {old}" in t for t in texts), texts
    assert any(f"Instance {old} ({victim}) is unhealthy" in t and "NvidiaGPUUnhealthy" in t and "Xid 79" in t
               for t in texts), texts
    metrics = urllib.request.urlopen(f"{server.endpoint}/metrics", timeout=10).read().decode()  # noqa: S310
    assert 'slurmpod_node_faults_total{action="Replace",fault="NvidiaGPUUnhealthy"} 1.0' in metrics or \
        'slurmpod_node_faults_total{fault="NvidiaGPUUnhealthy",action="Replace"} 1.0' in metrics, metrics

    # 2. the same job without the flag fails
    job = _submit(state, "plain", "")
    _wait_checkpoints(state, job)
    _, old, others = _inject_on_other_node(state, c, job)
    assert _wait_done(state, job) == "FAILED", _sh(state, f"cat {DIR}/{job}.out")
    assert "[Auto Resume]" not in _sh(state, f"cat {DIR}/{job}.out")
    _wait_replaced(c, old, others)

    # 3. GRES: requeued, the same JobID runs again from the beginning of its script, the app from its checkpoint
    job = _submit(state, "gres", "--auto-resume=1", "--gres=gpu:8")
    _wait_checkpoints(state, job)
    _inject_on_other_node(state, c, job)
    assert _wait_done(state, job, timeout=240) == "COMPLETED", _sh(state, f"cat {DIR}/{job}.out")
    out = _sh(state, f"cat {DIR}/{job}.out")
    assert f"requeueing job {job}" in out, out
    assert _job(state, job)["Restarts"] == "1"
    assert any(ln.endswith(tuple(f"resumes at {k}" for k in range(2, 13))) for ln in out.splitlines()), out
