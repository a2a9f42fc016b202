"""Scenario 9: job auto-resume after an injected GPU fault, against a plain node replacement, side by side in one
run on one local cluster (a controller and two ``ml.p5.48xlarge`` compute nodes, accounting on).

* ``auto_resume`` run: a 2-node ``srun --auto-resume=1`` job checkpointing every second; ``slurmpod faults inject
  ... gpu-xid`` on the node that is not the batch host; measured from the injection: the health agent's
  ``Action:Replace`` mark in Slurm, the replacement instance Running, and the step running again (its first
  ``[Auto Resume] ... StepID: 1`` line in the job's output). Target: step running again <= 30 s.
* ``replacement`` run (the floor): BatchReplaceClusterNodes of one idle compute node -> its successor Running and
  idle in Slurm (what every auto-resume pays at least).
Runs alternate between the two. The ratio is auto-resume / replacement.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.api_run import ROLE, _wait_status, stop_server
from bench.seed_local import Progress, _cleanup_dir
from bench.server import BenchServer
from bench.stats import figure, summary

NAME = "resilience"
CLUSTER = "bench-resume"
TARGET_STEP_AGAIN = 30.0
DIR = "/fsx/bench"
APP = """import os, sys, time
path = "%s/ckpt.%s.%s" % (sys.argv[1], os.environ["SLURM_JOB_ID"], os.environ["SLURM_PROCID"])
i = int(open(path).read()) if os.path.exists(path) else 0
while True:
    time.sleep(1)
    i += 1
    open(path, "w").write(str(i))
"""
log = logging.getLogger(__name__)


def _groups() -> list[dict[str, Any]]:
    return [{"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
             "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
            {"InstanceGroupName": "gpu-group", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2,
             "ThreadsPerCore": 1, "ExecutionRole": ROLE,
             "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["gpu"]}}]


class Cluster:
    def __init__(self, server: BenchServer) -> None:
        self.server = server
        self.client = server.client()

    def sh(self, script: str, timeout: float = 60) -> str:
        r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "connect", "--cluster", CLUSTER, "--state-dir",
                            str(self.server.state_dir), "--", "bash", "-c", script],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{script!r} failed: {r.stderr.strip()[-400:]}")
        return r.stdout.strip()

    def compute(self) -> dict[str, tuple[str, str]]:
        """instance id -> (status, hostname) of the compute group."""
        out = {}
        for n in self.client.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]:
            if n["InstanceGroupName"] == "gpu-group":
                d = self.client.describe_cluster_node(ClusterName=CLUSTER, NodeId=n["InstanceId"])["NodeDetails"]
                out[n["InstanceId"]] = (n["InstanceStatus"]["Status"], d.get("PrivateDnsHostname", ""))
        return out

    def wait(self, what: str, check: Any, timeout: float = 180, poll: float = 0.2) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return time.monotonic()
            time.sleep(poll)
        raise RuntimeError(f"timed out waiting for {what}")

    def all_idle(self) -> bool:
        states = self.sh("sinfo -h -p gpu -N -o %t").split()
        return len(states) == 2 and set(states) == {"idle"}

    def successor(self, old: str) -> bool:
        nodes = self.compute()
        return old not in nodes and len(nodes) == 2 and all(s == "Running" for s, _ in nodes.values())


def auto_resume_run(c: Cluster) -> dict[str, float]:
    job = c.sh(f"cd {DIR} && sbatch --parsable -N2 -p gpu -o {DIR}/%j.out "
               f"--wrap 'srun --auto-resume=1 -N2 --ntasks-per-node=1 python3 {DIR}/app.py {DIR}'").split(";")[0]
    c.wait("checkpoints", lambda: c.sh(f"ls {DIR} | grep -c '^ckpt[.]{job}[.]' || true") == "2", timeout=60)
    info = dict(t.split("=", 1) for t in c.sh(f"scontrol -o show job {job}").split() if "=" in t)
    hosts = c.sh(f"scontrol show hostnames {info['NodeList']}").split()
    victim = next(h for h in hosts if h != info["BatchHost"])
    old = next(iid for iid, (_, host) in c.compute().items() if host == victim)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "slurmpod.cli", "faults", "inject", CLUSTER, "--node", victim, "gpu-xid",
                    "--state-dir", str(c.server.state_dir)], check=True, capture_output=True, timeout=60)
    marked = c.wait("Action:Replace", lambda: "Action:Replace" in c.sh(f"sinfo -h -n {victim} -o %E || true")
                    or old not in c.compute(), poll=0.1)
    replaced = c.wait("the replacement", lambda: c.successor(old))
    again = c.wait("the step running again", lambda: f"JobID: {job} StepID: 1 TaskID" in c.sh(
        f"cat {DIR}/{job}.out"), poll=0.2)
    c.sh(f"scancel {job}")
    c.wait("idle nodes", c.all_idle, timeout=120)
    return {"marked": marked - t0, "replaced": replaced - t0, "step_again": again - t0}


def replacement_run(c: Cluster) -> float:
    old = next(iter(c.compute()))
    t0 = time.monotonic()
    c.client.batch_replace_cluster_nodes(ClusterName=CLUSTER, NodeIds=[old])
    c.wait("the replacement", lambda: c.successor(old))
    done = c.wait("idle nodes", c.all_idle, timeout=120)
    return done - t0


def run(runs: int, workdir: Path | None = None, progress: Progress = print) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-res-", dir=workdir))
    server = BenchServer(root / "state")
    resumes: list[dict[str, float]] = []
    replacements: list[float] = []
    try:
        server.start()
        c = Cluster(server)
        c.client.create_cluster(ClusterName=CLUSTER, InstanceGroups=_groups())
        _wait_status(c.client, CLUSTER, {"InService", "Failed"}, 240)
        c.sh(f"mkdir -p {DIR} && cat > {DIR}/app.py <<'EOF'\n{APP}EOF")
        c.wait("idle nodes", c.all_idle)
        for i in range(runs):
            for kind in (("resume", "replace") if i % 2 == 0 else ("replace", "resume")):
                if kind == "resume":
                    r = auto_resume_run(c)
                    resumes.append(r)
                    progress(f"run {i + 1}/{runs} auto-resume: marked {r['marked']:.1f}s, replaced "
                             f"{r['replaced']:.1f}s, step running again {r['step_again']:.1f}s after the fault")
                else:
                    replacements.append(replacement_run(c))
                    progress(f"run {i + 1}/{runs} replacement: idle again {replacements[-1]:.1f}s")
    finally:
        stop_server(server, log.warning)
        left = _cleanup_dir(root / "state")
        if left:
            log.error("leftovers remain under %s: %s", root, left)
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc: dict[str, Any] = {
        "auto_resume": {k: summary([r[k] for r in resumes], "s", TARGET_STEP_AGAIN if k == "step_again" else None)
                        for k in ("marked", "replaced", "step_again")},
        "replacement": {"idle_again": summary(replacements, "s")},
    }
    floor = doc["replacement"]["idle_again"]["median"]["value"]
    doc["ratios"] = {"step_again_vs_replacement": figure(
        doc["auto_resume"]["step_again"]["median"]["value"] / floor if floor else 0.0, "ratio")}
    return doc
