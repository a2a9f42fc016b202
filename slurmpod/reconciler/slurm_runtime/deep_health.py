"""Deep health checks on real Slurm: HyperPod's Slurm objects and the checks as job steps.

* isolation: the nodes join the reservation ``hyperpod-deep-health-check`` (``Flags=MAINT,IGNORE_JOBS``, user
  root: running jobs go on, nothing new of anyone else starts there) and the hidden partition
  ``hyperpod-system-maintenance``, and get the feature ``SageMakerDeepHealthCheck:InProgress`` next to their
  group's. Both objects are made when the first node enters and deleted when the last leaves (``sinfo -a -N -l``,
  ``scontrol show reservations`` show them meanwhile). A slurmctld restart drops the runtime partition: the next
  isolation (before every run) makes it again.
* the checks: ``srun`` from the primary controller, in the reservation and partition, one task per node
  (``squeue -a`` shows the job ``sagemaker-deep-health-check``): ``slurmpod-deep-health-check stress`` for
  InstanceStress, ``… connectivity`` (TCP to every node of the group on slurmd's port, the step itself across all
  of them) for InstanceConnectivity. Each node's part prints ``DHC-RESULT <host> <json>``; a node without that
  line failed.
* results: the stream ``DeepHealthCheckResults/<instance-id>`` (control plane) and HyperPod's on-node log.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import hostlist

from slurmpod.domain import deep_health as dh
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import DeepHealthCheck
from slurmpod.lifecycle.logstreams import deep_health_stream
from slurmpod.lifecycle.nodeprograms import BIN
from slurmpod.providers.base import CommandRunner, ProviderError
from slurmpod.reconciler.runtime import DeepHealthResult
from slurmpod.reconciler.slurm_runtime import probes
from slurmpod.slurm import admin, control
from slurmpod.slurm.conf import SLURMD_PORT

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime

log = logging.getLogger("slurmpod.runtime")

PROGRAM = f"{BIN}/slurmpod-deep-health-check"
FAILED_REASON = control.REASON_PREFIX + "deep health check failed"
_RESULT = re.compile(r"^(\d+): " + re.escape("DHC-RESULT") + r" (\S+) (\{.*\})\s*$")
_TASK = re.compile(r"^(\d+): (.*)$")
#: one isolation change at a time per cluster (the reservation's node list is read, changed and written)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(cluster_id: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(cluster_id, threading.Lock())


def _scontrol(r: CommandRunner, *args: str) -> tuple[int, str]:
    res = r.run(["scontrol", *args], timeout=30)
    return res.returncode, (res.stdout + res.stderr).strip()


def _members(r: CommandRunner, kind: str, name: str) -> set[str] | None:
    """Nodes of the reservation/partition ``name`` (None: it does not exist)."""
    rc, out = _scontrol(r, "show", kind, name, "-o")
    if rc != 0 or "not found" in out.lower():
        return None
    m = re.search(r"\bNodes=(\S+)", out)
    if not m or m.group(1) in ("(null)", ""):
        return set()
    return set(hostlist.expand_hostlist(m.group(1)))


def _set_members(r: CommandRunner, kind: str, name: str, old: set[str] | None, new: set[str]) -> None:
    key = "ReservationName" if kind == "reservation" else "PartitionName"
    nodes = hostlist.collect_hostlist(sorted(new)) if new else ""
    if old == new:
        return
    if not new:
        argv = ["delete", f"{key}={name}"]
    elif old is None and kind == "reservation":
        argv = ["create", f"{key}={name}", f"Nodes={nodes}", "StartTime=now", "Duration=infinite", "Users=root",
                "Flags=MAINT,IGNORE_JOBS"]
    elif old is None:
        argv = ["create", f"{key}={name}", f"Nodes={nodes}", "State=UP", "MaxTime=INFINITE", "Hidden=YES"]
    else:
        argv = ["update", f"{key}={name}", f"Nodes={nodes}"]
    rc, out = _scontrol(r, *argv)
    if rc != 0 and not (argv[0] == "delete" and "not found" in out.lower()):
        raise control.SlurmError(f"scontrol {' '.join(argv)} failed: {out}")


def _set_features(r: CommandRunner, name: str, group: str, checking: bool) -> None:
    features = f"{group},{dh.FEATURE}" if checking else group
    rc, out = _scontrol(r, "update", f"NodeName={name}", f"AvailableFeatures={features}",
                        f"ActiveFeatures={features}")
    if rc != 0:
        raise control.SlurmError(f"scontrol update NodeName={name} features failed: {out}")


def isolate(rt: SlurmRuntime, cluster: ClusterRecord, targets: Sequence[NodeRecord],
            nodes: Sequence[NodeRecord]) -> None:
    r = rt.primary(cluster, nodes)
    names = {n.hostname for n in targets if n.hostname}
    if r is None or not names:
        return
    with _lock(cluster.cluster_id):
        for kind, name in (("reservation", dh.RESERVATION), ("partition", dh.PARTITION)):
            old = _members(r, kind, name)
            _set_members(r, kind, name, old, (old or set()) | names)
        for n in targets:
            if n.hostname:
                _set_features(r, n.hostname, n.group, True)


def release(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], *,
            passed: bool) -> None:
    r = rt.primary(cluster, [n for n in nodes if n.instance_id != node.instance_id])
    name = node.hostname
    if r is None or not name:
        return
    ctl = admin.SlurmControl(r)
    with _lock(cluster.cluster_id):
        if not passed:
            try:
                ctl.drain(name, FAILED_REASON)
            except control.SlurmError as exc:
                log.warning("node %s: cannot drain it after its failed deep health check: %s", name, exc)
        for kind, obj in (("reservation", dh.RESERVATION), ("partition", dh.PARTITION)):
            old = _members(r, kind, obj)
            if old is not None and name in old:
                _set_members(r, kind, obj, old, old - {name})
        try:
            _set_features(r, name, node.group, False)
        except control.SlurmError as exc:
            log.warning("node %s: cannot clear the deep health check feature: %s", name, exc)


def _srun(rt: SlurmRuntime, cluster: ClusterRecord, targets: Sequence[NodeRecord], nodes: Sequence[NodeRecord],
          args: Sequence[str], timeout: float) -> tuple[dict[str, DeepHealthResult], str]:
    """One step over ``targets``: instance id -> result (from each task's DHC-RESULT line), and srun's tail."""
    r = rt.primary(cluster, nodes)
    by_host = {n.hostname: n for n in targets if n.hostname}
    if r is None:
        return {}, "no controller is running"
    hosts = hostlist.collect_hostlist(sorted(by_host))
    argv = ["srun", f"--reservation={dh.RESERVATION}", f"--partition={dh.PARTITION}", f"--nodelist={hosts}",
            f"--nodes={len(by_host)}", "--ntasks-per-node=1", f"--job-name={dh.JOB_NAME}", "--label",
            "--kill-on-bad-exit=0", PROGRAM, *args]
    try:
        res = r.run(argv, timeout=timeout)
    except ProviderError as exc:
        return {}, f"srun did not finish: {exc}"
    task_host: dict[str, str] = {}
    results: dict[str, DeepHealthResult] = {}
    parsed: list[tuple[str, str]] = []
    for line in res.stdout.splitlines():
        m = _RESULT.match(line)
        if m and m.group(2) in by_host:
            task_host[m.group(1)] = m.group(2)
            try:
                body = json.loads(m.group(3))
            except ValueError:
                body = {"ok": False, "detail": "unreadable result"}
            results[m.group(2)] = DeepHealthResult(bool(body.get("ok")), str(body.get("detail") or ""))
        t = _TASK.match(line)
        if t:
            parsed.append((t.group(1), t.group(2)))
    logs: dict[str, list[str]] = {}
    for task, text in parsed:
        if task in task_host and not text.startswith("DHC-RESULT"):
            logs.setdefault(task_host[task], []).append(text)
    out = {by_host[h].instance_id: DeepHealthResult(v.ok, v.detail, "\n".join(logs.get(h, [])) + "\n")
           for h, v in results.items()}
    tail = " | ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
    return out, f"srun exited {res.returncode}: {tail}" if res.returncode != 0 else ""


def _unusable(rt: SlurmRuntime, cluster: ClusterRecord, targets: Sequence[NodeRecord],
              nodes: Sequence[NodeRecord]) -> dict[str, str]:
    """Targets Slurm will not run a step on (FAIL or DOWN, e.g. marked ``Action:Replace`` by the node's health agent
    before its check began): instance id -> why. Empty when slurmctld cannot say (the steps then tell)."""
    states = probes.node_states(rt, cluster, nodes)
    out = {}
    for n in targets:
        sn = states.get(n.hostname or "")
        if sn is not None and (sn.is_failed() or sn.is_down()):
            out[n.instance_id] = (f"{n.hostname} is {'+'.join(sorted(sn.states))} in Slurm"
                                  f" ({sn.reason or 'no reason'}): no check can run on it")
    return out


def run(rt: SlurmRuntime, cluster: ClusterRecord, targets: Sequence[NodeRecord], checks: Sequence[DeepHealthCheck],
        nodes: Sequence[NodeRecord], stress_seconds: float) -> Mapping[str, DeepHealthResult]:
    steps: list[tuple[list[str], float]] = []
    if DeepHealthCheck.INSTANCE_STRESS in checks:
        steps.append((["stress", "--seconds", f"{stress_seconds:g}"], stress_seconds + 120))
    if DeepHealthCheck.INSTANCE_CONNECTIVITY in checks:
        group = {n.group for n in targets}
        peers = sorted(n.ip for n in nodes if n.group in group and n.active and n.ip and "daemons" in n.phases)
        steps.append((["connectivity", "--peers", ",".join(peers), "--ports", str(SLURMD_PORT)], 120.0))
    outcome: dict[str, DeepHealthResult] = {n.instance_id: DeepHealthResult(True, "no checks") for n in targets}
    logs: dict[str, list[str]] = {n.instance_id: [] for n in targets}
    unusable = _unusable(rt, cluster, targets, nodes)
    for iid, why in unusable.items():  # no step could start there (it would wait for the node until its timeout)
        outcome[iid] = DeepHealthResult(False, why)
        logs[iid].append(f"{why}\n")
    live = [n for n in targets if n.instance_id not in unusable]
    for args, timeout in steps if live else ():
        step, trouble = _srun(rt, cluster, live, nodes, args, timeout)
        for n in live:
            res = step.get(n.instance_id) or DeepHealthResult(
                False, f"{args[0]} check gave no result on {n.hostname}" + (f" ({trouble})" if trouble else ""))
            logs[n.instance_id].append(res.log or f"{res.detail}\n")
            prev = outcome[n.instance_id]
            if not res.ok:
                detail = res.detail if prev.ok else f"{prev.detail}; {res.detail}"
                outcome[n.instance_id] = DeepHealthResult(False, detail)
            elif prev.detail == "no checks" or prev.ok:
                outcome[n.instance_id] = DeepHealthResult(True, "passed")
    final = {}
    for n in targets:
        text = "".join(logs[n.instance_id])
        final[n.instance_id] = DeepHealthResult(outcome[n.instance_id].ok, outcome[n.instance_id].detail, text)
        try:
            rt.logs.write(cluster.cluster_id, deep_health_stream(n.instance_id), text, cluster_name=cluster.name)
        except (OSError, ValueError) as exc:
            log.warning("node %s: cannot keep its deep health check log: %s", n.instance_id, exc)
    return final
