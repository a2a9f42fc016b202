"""``slurmpod-fault``: injects, clears and lists rehearsal faults inside this node (run as root by
``slurmpod faults``; ``node-crash`` is done from outside the node, by the provider).

Each fault leaves its marker (``faults.FAULT_DIR``) and has the effect the real one would have:

* ``gpu-xid``: the tasks of the node's job steps die (a CUDA context does not survive Xid 79), the kernel-style
  ``NVRM: Xid`` line goes to the node's journal, the GPU check fails -> ``Action:Replace``;
* ``gpu-lost``: the same, the GPU counted missing -> ``Action:Replace``;
* ``slurmd-hang``: every slurmd is stopped (SIGSTOP) -> ``Action:Reboot``; ``clear`` continues them;
* ``network-partition``: a routing rule makes every address but the node's own unreachable (routes are kept, so
  ``clear`` restores the network exactly).

``--duration S`` clears the fault by itself after S seconds (a transient timer unit), so a fault that cuts the node
off (network-partition) can be rehearsed on a host reached over the network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import checks, faults

PARTITION_RULE = ("priority", "5", "prohibit")
_STEP_RE = re.compile(r"slurmstepd: \[(\d+)\.(\d+)\]")  # a job step's stepd (not .batch, not .extern)
SELF = "/usr/lib/slurmpod/bin/slurmpod-fault"


def _run(argv: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603


def _procs() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, comm, cmdline) of every process of the node."""
    out: dict[int, tuple[int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out[int(entry)] = (ppid, comm, cmdline.strip())
    return out


def kill_step_tasks() -> list[int]:
    """SIGKILLs every process under a job step's slurmstepd (batch scripts survive: the job sees a failed step)."""
    procs = _procs()
    stepds = {pid for pid, (_, comm, cmd) in procs.items() if comm == "slurmstepd" and _STEP_RE.search(cmd)}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    victims: list[int] = []
    todo = [c for s in stepds for c in children.get(s, [])]
    while todo:
        pid = todo.pop()
        victims.append(pid)
        todo += children.get(pid, [])
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return victims


def _journal(line: str) -> None:
    if shutil.which("logger"):
        _run(["logger", "-t", "kernel", "-p", "kern.err", line])


def inject(kind: str, gpu: int, duration: float | None) -> dict[str, object]:
    marker: dict[str, object] = {"kind": kind, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if kind in ("gpu-xid", "gpu-lost"):
        marker.update(gpu=gpu, xid=79 if kind == "gpu-xid" else None)
        _journal(f"NVRM: Xid (PCI:0000:{0x53 + gpu:02x}:00): 79, GPU has fallen off the bus." if kind == "gpu-xid"
                 else f"NVRM: GPU at PCI:0000:{0x53 + gpu:02x}:00: GPU has fallen off the bus.")
        marker["killed"] = len(kill_step_tasks())
    elif kind == "slurmd-hang":
        pids = checks.pids_of("slurmd")
        if not pids:
            raise SystemExit("slurmpod-fault: no slurmd runs on this node")
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        marker["pids"] = pids
    elif kind == "network-partition":
        r = _run(["ip", "rule", "add", *PARTITION_RULE])
        if r.returncode != 0 and "File exists" not in r.stderr:
            raise SystemExit(f"slurmpod-fault: ip rule failed: {r.stderr.strip()}")
    else:
        raise SystemExit(f"slurmpod-fault: {kind} is not injected from inside the node")
    d = Path(faults.FAULT_DIR)
    d.mkdir(parents=True, exist_ok=True)
    (d / kind).write_text(json.dumps(marker, sort_keys=True) + "\n")
    if duration:
        r = _run(["systemd-run", f"--on-active={int(duration)}s", f"--unit=slurmpod-fault-clear-{kind}",
                  "--collect", SELF, "clear", kind])
        if r.returncode != 0:
            clear([kind])
            raise SystemExit(f"slurmpod-fault: cannot schedule the clear after {duration:.0f} s: {r.stderr.strip()}")
        marker["clears_in"] = duration
    return marker


def clear(kinds: list[str]) -> list[str]:
    marked = faults.active()
    done = []
    for kind in kinds or list(marked):
        if kind == "slurmd-hang":
            for pid in checks.pids_of("slurmd"):
                os.kill(pid, signal.SIGCONT)
        elif kind == "network-partition":
            while _run(["ip", "rule", "del", *PARTITION_RULE]).returncode == 0:
                pass
        path = Path(faults.FAULT_DIR) / kind
        if path.exists() or kind in marked:
            path.unlink(missing_ok=True)
            done.append(kind)
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="slurmpod-fault", description="rehearsal faults inside this node")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("inject")
    i.add_argument("kind", choices=[k for k in faults.KINDS if k != "node-crash"])
    i.add_argument("--gpu", type=int, default=0)
    i.add_argument("--duration", type=float, default=None)
    c = sub.add_parser("clear")
    c.add_argument("kinds", nargs="*", metavar="KIND", help="default: every fault marked in this node")
    sub.add_parser("list")
    args = p.parse_args(argv)
    unknown = [k for k in getattr(args, "kinds", []) if k not in faults.KINDS]
    if unknown:
        p.error(f"unknown fault kind {unknown[0]!r} (known: {', '.join(faults.KINDS)})")
    if args.cmd == "inject":
        print(json.dumps(inject(args.kind, args.gpu, args.duration), sort_keys=True))
    elif args.cmd == "clear":
        print(json.dumps({"cleared": clear(args.kinds)}))
    else:
        print(json.dumps(faults.active(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
