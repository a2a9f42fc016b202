"""The node's health monitoring agent (HyperPod's HMA on a Slurm node): ``slurmpod-health.service``.

Every ``interval`` seconds it runs the cheap checks (``checks.run_all(rpc=False)``: daemons alive and not stopped,
GPUs present and without an injected fault, disk and memory); every ``rpc_interval`` seconds also the ones that
talk to daemons (slurmd's own RPC, a munge credential round trip). A check failing ``STRIKES[name]`` passes in a
row is a fault (a slurmd restart is not). On the first fault the agent marks the node in Slurm as HyperPod's does,
exact and case-sensitive: ``state=fail reason="Action:Replace"`` (or ``Action:Reboot``), which slurmpod acts on once
the node's jobs end (with NodeRecovery ``None`` the mark stays, a label only: slurmpod reads ``STATE_FILE`` to tell
the agent's marks from an operator's). It never overrides a reason someone else set (an operator's, a drain), and
leaves a node in its deep health checks (feature ``SageMakerDeepHealthCheck:InProgress``) to them.

It arms itself only once the node's slurmd answers: a node still booting is not faulty. What it saw is in
``STATE_FILE`` (slurmpod reads it to word the event) and, as HMA's CloudWatch records, one JSON line per
detection in ``LOG_FILE``.

Configuration: ``CONFIG_FILE`` (written by slurmpod at boot on compute nodes): ``interval``, ``rpc_interval``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from . import checks

# typing is not imported at run time: the health agent is resident in every compute node
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CONFIG_FILE = "/etc/slurmpod/health.json"
STATE_FILE = "/run/slurmpod/health.json"
LOG_FILE = "/var/log/aws/clusters/sagemaker-health-monitoring-agent.log"
#: passes in a row a check must fail before it is a fault (GPUs: at once, as an Xid is)
STRIKES = {"gpu": 1, "slurmd": 3, "munged": 3, "disk": 3, "memory": 3}
SCONTROL_TIMEOUT = 20.0


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_json(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _log(record: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(LOG_FILE), exist_ok=True)
    with open(LOG_FILE, "a") as f:
        f.write(json.dumps({"ts": _now(), **record}, sort_keys=True) + "\n")
    print(record.get("msg", ""), flush=True)  # the journal


def _scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True,  # noqa: S603, S607
                          timeout=SCONTROL_TIMEOUT, check=False)


DHC_FEATURE = "SageMakerDeepHealthCheck:InProgress"  # a node in its deep health checks: they own it


def node_reason(name: str) -> tuple[str, str, str] | None:
    """(state, reason, features) of Slurm node ``name`` as slurmctld has it; None when slurmctld cannot say."""
    try:
        r = _scontrol("-o", "show", "node", name)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    rec = checks.parse_record(r.stdout.strip())
    features = ",".join(rec.get(k, "") for k in ("AvailableFeatures", "ActiveFeatures"))
    return rec.get("State", ""), checks.slurm_reason(rec), features


def reason_for(result: checks.Result) -> tuple[str, str]:
    """(state, reason) the agent sets for a fault: HyperPod's exact strings."""
    return "fail", "Action:Replace" if result.action == "replace" else "Action:Reboot"


class Agent:
    def __init__(self, config: dict[str, Any], hostname: str) -> None:
        self.interval = float(config.get("interval", 2.0))
        self.rpc_interval = float(config.get("rpc_interval", 30.0))
        self.compute = bool(config.get("compute", True))
        self.hostname = hostname
        self.armed = False
        self.strikes: dict[str, int] = {}
        self.marked: dict[str, Any] | None = None
        self._last_rpc = 0.0
        self._fresh: checks.Result | None = None

    def arm(self) -> None:
        if self.armed:
            return
        self._fresh = checks.check_slurmd(rpc=True)
        if self._fresh.ok:
            self.armed = True
            _log({"level": "info", "msg": f"health monitoring armed on {self.hostname}: slurmd answers"})

    def one_pass(self) -> checks.Result | None:
        """Runs the checks once; returns the fault to act on, if any."""
        now = time.monotonic()
        rpc = now - self._last_rpc >= self.rpc_interval
        if rpc:
            self._last_rpc = now
        # the slurmd answer arm() just had is this pass's (one RPC, not two, in the pass that arms)
        fresh, self._fresh = self._fresh, None
        results = checks.run_all(self.compute, rpc=rpc, slurmd=fresh if rpc else None)
        fault = None
        for r in results:
            self.strikes[r.name] = 0 if r.ok else self.strikes.get(r.name, 0) + 1
            if not r.ok and fault is None and self.strikes[r.name] >= STRIKES.get(r.name, 3):
                fault = r
        _write_json(STATE_FILE, {
            "checked": _now(), "armed": self.armed, "hostname": self.hostname,
            "results": [{"name": r.name, "ok": r.ok, "detail": r.detail} for r in results],
            "fault": self.marked,
        })
        return fault

    def act(self, fault: checks.Result) -> None:
        if self.marked is not None or not self.armed:
            return
        state, reason = reason_for(fault)
        current = node_reason(self.hostname)
        if current is None:
            return  # slurmctld unreachable from here: try again next pass
        if DHC_FEATURE in current[2].split(","):
            return  # its deep health checks run the same checks and replace the node themselves
        if current[1]:
            self.marked = {"fault": fault.fault, "detail": fault.detail, "action": fault.action,
                           "reason": current[1], "left_alone": True, "at": _now()}
            _log({"level": "warn", "msg": f"{fault.fault} on {self.hostname}: {fault.detail}; the node already has "
                  f"reason {current[1]!r}: left as it is", "HealthMonitoringAgentDetectionEvent": "HealthEvent",
                  "condition": fault.fault})
            return
        try:
            r = _scontrol("update", f"nodename={self.hostname}", f"state={state}", f"reason={reason}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            _log({"level": "error", "msg": f"cannot mark {self.hostname} {reason}: {exc}"})
            return
        if r.returncode != 0:
            _log({"level": "error", "msg": f"cannot mark {self.hostname} {reason}: {r.stderr.strip()}"})
            return
        self.marked = {"fault": fault.fault, "detail": fault.detail, "action": fault.action, "reason": reason,
                       "state": state, "at": _now()}
        _log({"level": "error", "msg": f"{fault.fault} found on {self.hostname}: {fault.detail}; node set to "
              f"{state} with reason {reason}", "HealthMonitoringAgentDetectionEvent": "HealthEvent",
              "condition": fault.fault, "check": fault.name, "action": fault.action.capitalize()})

    def run(self) -> None:
        while True:
            self.arm()
            fault = self.one_pass()
            if fault is not None:
                self.act(fault)
                self.one_pass()  # the state file shows the mark at once
            time.sleep(self.interval)


def main() -> int:
    try:
        config = json.loads(checks.read_text(CONFIG_FILE))
    except (OSError, ValueError) as exc:
        print(f"slurmpod-health: no configuration ({CONFIG_FILE}: {exc}): nothing to monitor", file=sys.stderr)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    Agent(config if isinstance(config, dict) else {}, os.uname().nodename).run()
    return 0
