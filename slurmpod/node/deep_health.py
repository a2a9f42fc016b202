"""``slurmpod-deep-health-check``: one node's part of a deep health check, run as a Slurm job step in the
``hyperpod-deep-health-check`` reservation (``srun`` from the controller starts it on every node being checked).

* ``stress [--seconds S]``: InstanceStress's hardware check -- stress-ng on the CPUs and memory for S seconds,
  then the GPU check (``checks.check_gpus``: the devices gres.conf lists, ``nvidia-smi`` where the driver is,
  injected ``gpu-xid``/``gpu-lost`` faults);
* ``connectivity --peers IP,IP… [--ports 6818,…]``: InstanceConnectivity -- a TCP connection to every peer on
  Slurm's ports (the step itself spans the nodes: srun's own connections are the rest of the check).

Every line goes to stdout and to HyperPod's on-node log ``/var/log/aws/clusters/sagemaker-deep-health-check.log``;
the last stdout line is ``DHC-RESULT <hostname> <json>`` (``{"ok": bool, "detail": str}``). Exit 0 when it passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence

from . import checks

LOG = "/var/log/aws/clusters/sagemaker-deep-health-check.log"
STRESS_NG = "stress-ng"
RESULT_PREFIX = "DHC-RESULT"
VM_BYTES = "64M"  # stress-ng's memory workers: enough to exercise the allocator, small next to any instance type


class Report:
    def __init__(self, check: str, log_path: str = LOG) -> None:
        self.check = check
        self.log_path = log_path
        self.failures: list[str] = []

    def line(self, text: str, *, failed: bool = False) -> None:
        if failed:
            self.failures.append(text)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        out = f"{stamp} [{self.check}] {text}"
        print(out, flush=True)
        try:
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(out + "\n")
        except OSError:
            pass  # the log is a copy: stdout is what slurmpod reads

    def finish(self) -> int:
        ok = not self.failures
        detail = "; ".join(self.failures) if self.failures else f"{self.check} passed"
        self.line(f"{self.check} {'passed' if ok else 'failed'}")
        print(f"{RESULT_PREFIX} {socket.gethostname()} {json.dumps({'ok': ok, 'detail': detail})}", flush=True)
        return 0 if ok else 1


def stress(seconds: float, report: Report) -> None:
    exe = shutil.which(STRESS_NG)
    if exe is None:
        report.line("stress-ng failure: stress-ng is not installed", failed=True)
    else:
        argv = [exe, "--cpu", "0", "--vm", "1", "--vm-bytes", VM_BYTES, "--timeout", f"{max(1, round(seconds))}s",
                "--metrics-brief"]
        try:
            r = subprocess.run(argv, capture_output=True, timeout=seconds + 60, check=False)  # noqa: S603
            tail = (r.stdout + r.stderr).decode(errors="replace").strip().splitlines()[-3:]
            if r.returncode == 0:
                report.line("stress-ng success")
            else:
                report.line(f"stress-ng failure (exit {r.returncode}): {' | '.join(tail)}", failed=True)
        except (OSError, subprocess.TimeoutExpired) as exc:
            report.line(f"stress-ng failure: {exc}", failed=True)
    gpu = checks.check_gpus()
    if gpu.ok:
        report.line(f"GpuPci Count check success ({gpu.detail})")
    else:
        report.line(f"GpuPci Count check failed: {gpu.detail}", failed=True)


def connectivity(peers: Sequence[str], ports: Sequence[int], report: Report, timeout: float = 3.0) -> None:
    bad = []
    for peer in peers:
        for port in ports:
            try:
                with socket.create_connection((peer, port), timeout=timeout):
                    pass
            except OSError as exc:
                bad.append(f"{peer}:{port} ({exc})")
    if bad:
        report.line(f"Connectivity check failed: cannot reach {', '.join(bad)}", failed=True)
    else:
        report.line(f"Connectivity check success: reached {len(peers)} peer(s) on port(s) "
                    f"{', '.join(str(p) for p in ports)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurmpod-deep-health-check")
    sub = parser.add_subparsers(dest="check", required=True)
    s = sub.add_parser("stress")
    s.add_argument("--seconds", type=float, default=5.0)
    c = sub.add_parser("connectivity")
    c.add_argument("--peers", default="")
    c.add_argument("--ports", default="6818")
    args = parser.parse_args(argv)
    if args.check == "stress":
        report = Report("InstanceStress")
        stress(args.seconds, report)
    else:
        report = Report("InstanceConnectivity")
        peers = [p for p in args.peers.split(",") if p]  # itself included: its own slurmd must answer too
        connectivity(peers, [int(p) for p in args.ports.split(",") if p], report)
    return report.finish()
