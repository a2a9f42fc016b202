"""``srun --auto-resume=1``: HyperPod's job auto-resume, run in the job by slurmpod's SPANK plugin.

The plugin (``spank_auto_resume.c``) turns an ``srun --auto-resume=1 ...`` inside an allocation into
``auto-resume -- srun --auto-resume=1 ...``: this program runs that srun as its child (``CHILD_ENV`` set, so the
plugin lets it through; ``SLURM_KILL_BAD_EXIT=1`` unless set: a failed task ends the step at once, as HyperPod's
plugin terminates it) and exits with its exit code. When the step fails:

1. it asks the cluster (slurmctld, which the nodes' health agents keep informed) whether a node of the job is
   faulty: marked ``Action:Replace``/``Action:Reboot`` by its health agent or an operator, or down. It waits up to
   ``DIAGNOSE_SECONDS`` for a mark (an agent looks every 2 s), then answers ``ResumeAction=RETRYSTEP`` or ``NONE``;
   ``NONE`` (a plain application failure) fails the step as without the flag;
2. ``RETRYSTEP`` for a job without GRES: the job is shrunk to its healthy nodes (slurmpod replaces the faulty ones,
   which keep their hostnames), a helper allocation ``--dependency=expand:<job>`` waits for the replacements, its
   nodes are merged back into the job (Slurm's job expansion, ``SchedulerParameters=permit_job_expansion``), and
   the step runs again in the same JobID, its environment updated to the new allocation;
3. ``RETRYSTEP`` for a job with GRES (Slurm cannot expand those), or when the faulty node is the batch host: the
   job is requeued, and restarts from the beginning with the same JobID once the node is back.

The application must resume from its own checkpoint. Every step of this is an ``[Auto Resume]`` line in the
job's output, worded as HyperPod's (typos included). Settings (environment): ``SLURMPOD_AUTO_RESUME_MAX_ATTEMPTS``
(3), ``SLURMPOD_AUTO_RESUME_DIAGNOSE_SECONDS`` (20), ``SLURMPOD_AUTO_RESUME_TIMEOUT`` (3600: HyperPod's service
timeout, the longest wait for a replacement).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .checks import parse_record, slurm_reason

CHILD_ENV = "SLURMPOD_AUTO_RESUME_CHILD"
ACTIONS = ("Action:Replace", "Action:Reboot")
FAULTY_STATES = ("DOWN", "NOT_RESPONDING", "FAIL")
SCONTROL_TIMEOUT = 60.0
_GRANTED = re.compile(r"Granted job allocation (\d+)")
_PENDING = re.compile(r"Pending job allocation (\d+)")


def say(text: str) -> None:
    print(f"[Auto Resume] {text}", flush=True)


def _setting(name: str, default: float) -> float:
    try:
        return float(os.environ.get(f"SLURMPOD_AUTO_RESUME_{name}", default))
    except ValueError:
        return default


def scontrol(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT,  # noqa: S603, S607
                          check=False, cwd=cwd)


def job_info(job: str) -> dict[str, str]:
    r = scontrol("-o", "show", "job", job)
    if r.returncode != 0 or not r.stdout.strip():
        return {}
    return parse_record(r.stdout.splitlines()[0])


def hostnames(nodelist: str) -> list[str]:
    if not nodelist or nodelist == "(null)":
        return []
    r = scontrol("show", "hostnames", nodelist)
    return r.stdout.split() if r.returncode == 0 else nodelist.split(",")


def faulty_nodes(nodes: Sequence[str]) -> dict[str, str]:
    """node -> why, for the job's nodes Slurm knows as faulty now."""
    if not nodes:
        return {}
    r = scontrol("-o", "show", "node", ",".join(nodes))
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        rec = parse_record(line)
        name, state = rec.get("NodeName", ""), rec.get("State", "")
        reason = slurm_reason(rec)
        if name not in nodes:
            continue
        if reason in ACTIONS:
            out[name] = reason
        elif any(s in state.split("+") or s == state for s in FAULTY_STATES) or "*" in state:
            out[name] = f"{state} ({reason or 'no reason'})"
    return out


def diagnose(job: str, nodes: Sequence[str], seconds: float) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    while True:
        found = faulty_nodes(nodes)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(1.0)


def _compact(nodes: Sequence[str]) -> str:
    r = scontrol("show", "hostlist", ",".join(nodes))
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else ",".join(nodes)


def has_gres(info: Mapping[str, str]) -> bool:
    tres = " ".join(info.get(k, "") for k in ("AllocTRES", "TresPerNode", "TresPerJob", "TresPerTask",
                                                "TresPerSocket", "Gres"))
    return "gres/" in tres or "gres:" in tres


def _clean_env() -> dict[str, str]:
    """The environment for a helper allocation: none of this job's SLURM_*/SALLOC_* variables."""
    keep = ("SLURM_CONF",)
    return {k: v for k, v in os.environ.items()
            if not (k.startswith(("SLURM_", "SALLOC_", "SBATCH_", "SRUN_")) and k not in keep)}


def expand(job: str, replaced: Sequence[str], info: Mapping[str, str], timeout: float) -> bool:
    """Waits for ``replaced`` in a helper allocation that depends on ``job`` (expand:), then merges them in."""
    argv = ["salloc", "--no-shell", f"--dependency=expand:{job}", f"--nodelist={','.join(replaced)}",
            f"--nodes={len(replaced)}", f"--job-name=auto-resume-{job}"]
    if info.get("Partition"):
        argv.append(f"--partition={info['Partition']}")
    if info.get("Account") and info["Account"] != "(null)":
        argv.append(f"--account={info['Account']}")
    helper: str | None = None
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,  # noqa: S603
                            env=_clean_env())
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line.rstrip(), flush=True)  # salloc: job J+1 queued and waiting for resources
            m = _GRANTED.search(line) or _PENDING.search(line)
            if m:
                helper = m.group(1)
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is None or proc.returncode != 0 or helper is None:
        if proc.poll() is None:
            proc.kill()
        if helper:
            subprocess.run(["scancel", helper], capture_output=True, timeout=SCONTROL_TIMEOUT, check=False)  # noqa: S603, S607
        return False
    with tempfile.TemporaryDirectory(prefix="auto-resume-") as cwd:  # scontrol writes resize scripts here
        released = scontrol("update", f"JobId={helper}", "NumNodes=0", cwd=cwd)
        merged = scontrol("update", f"JobId={job}", "NumNodes=ALL", cwd=cwd)
        _apply_resize_script(Path(cwd) / f"slurm_job_{job}_resize.sh")
    subprocess.run(["scancel", helper], capture_output=True, timeout=SCONTROL_TIMEOUT, check=False)  # noqa: S603, S607
    if released.returncode != 0 or merged.returncode != 0:
        say(f"Error: merging the replacement nodes failed: {(released.stderr + merged.stderr).strip()}")
        return False
    return True


def _apply_resize_script(path: Path) -> None:
    """The variables Slurm's resize script sets (``export SLURM_X="..."``), into this environment."""
    try:
        text = path.read_text()
    except OSError:
        return
    for line in text.splitlines():
        m = re.match(r'^export (SLURM_\w+)="?([^"]*)"?$', line.strip())
        if m:
            os.environ[m.group(1)] = m.group(2)


def _refresh_env(info: Mapping[str, str]) -> None:
    nodelist, count = info.get("NodeList", ""), info.get("NumNodes", "")
    if nodelist:
        os.environ["SLURM_JOB_NODELIST"] = os.environ["SLURM_NODELIST"] = nodelist
    if count:
        os.environ["SLURM_JOB_NUM_NODES"] = os.environ["SLURM_NNODES"] = count.split("-")[0]


class Child:
    """The real srun, with the signals a job's srun would get passed on."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped_by_signal = False
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
            signal.signal(sig, self._forward)

    def _forward(self, signum: int, _frame: object) -> None:
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self.stopped_by_signal = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def run(self, argv: Sequence[str], attempt: int) -> int:
        env = {**os.environ, CHILD_ENV: "1", "SLURMPOD_AUTO_RESUME_ATTEMPT": str(attempt)}
        # a task that fails ends the step at once (HyperPod's plugin terminates it), unless the user chose
        env.setdefault("SLURM_KILL_BAD_EXIT", "1")
        self.proc = subprocess.Popen(list(argv), env=env)  # noqa: S603
        while True:
            try:
                return self.proc.wait()
            except InterruptedError:
                continue


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: auto-resume -- srun [options] command ...", file=sys.stderr)
        return 2
    job = os.environ.get("SLURM_JOB_ID", "")
    max_attempts = int(_setting("MAX_ATTEMPTS", 3))
    child = Child()
    attempt = 0
    while True:
        rc = child.run(args, attempt)
        if rc == 0 or child.stopped_by_signal or not job:
            return rc if rc >= 0 else 128 - rc
        info = job_info(job)
        nodes = hostnames(info.get("NodeList", os.environ.get("SLURM_JOB_NODELIST", "")))
        say(f"Info: JobID: {job} Task failed on node(s) {_compact(nodes)} (exit code {rc})")
        if attempt >= max_attempts:
            say(f"Info: JobID: {job} Auto resume attempts exhausted ({max_attempts}): the step fails")
            return rc if rc >= 0 else 128 - rc
        say("Info: Initiating communication with cluster agent to diagnose health of nodes")
        faulty = diagnose(job, nodes, _setting("DIAGNOSE_SECONDS", 20))
        say(f"Info: Response from cluster agent: JobId={job}, ResumeAction={'RETRYSTEP' if faulty else 'NONE'}")
        if not faulty:
            return rc if rc >= 0 else 128 - rc
        for node, why in sorted(faulty.items()):
            say(f"Info: Node {node} is unhealthy: {why}")
        info = job_info(job) or info
        if has_gres(info) or info.get("BatchHost") in faulty:
            why = "the job has GRES" if has_gres(info) else "the batch host is unhealthy"
            say(f"Info: Job failed - {why}: requeueing job {job} (it restarts from the beginning, same JobID)")
            r = scontrol("requeue", job)
            if r.returncode != 0:
                say(f"Error: requeue of job {job} failed: {r.stderr.strip()}")
                return rc if rc >= 0 else 128 - rc
            time.sleep(_setting("TIMEOUT", 3600))  # slurmctld ends this batch script
            return rc if rc >= 0 else 128 - rc
        say("Info: Job failed - replacing nodes")
        healthy = [n for n in nodes if n not in faulty]
        say("Info: Droping unhealthy nodes")
        with tempfile.TemporaryDirectory(prefix="auto-resume-") as cwd:
            r = scontrol("update", f"JobId={job}", f"NodeList={','.join(healthy)}", cwd=cwd)
        if r.returncode != 0:
            say(f"Error: shrinking job {job} failed: {r.stderr.strip()}")
            return rc if rc >= 0 else 128 - rc
        say(f"Info: Succesfully shrink job to retain healthy nodes {_compact(healthy)}")
        if not expand(job, sorted(faulty), info, _setting("TIMEOUT", 3600)):
            say(f"Error: JobID: {job} the replacement nodes did not join: the step fails")
            return rc if rc >= 0 else 128 - rc
        say("Info: Job Expansion complete")
        info = job_info(job)
        _refresh_env(info)
        say(f"Info: Updating to new node list {info.get('NodeList', '')}")
        attempt += 1
        say(f"Info: Retrying step. Attempt number: {attempt}")
