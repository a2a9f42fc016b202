"""Where the time goes inside slurmpod: per-cluster milestones from the server log's timestamps."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ ([\w.]+): (.*)$")
_NEW = re.compile(r"^cluster (\S+): \d+ new instance\(s\) in (\S+)$")
_RUNNING = re.compile(r"^node (i-[0-9a-f]+) \((\S+) (\S+)\): Pending -> Running$")
_STATUS = re.compile(r"^cluster (\S+): (\w+) -> (\w+)")


def log_offset(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def milestones(path: Path, offset: int, cluster: str, t0: float) -> dict[str, float]:
    """Seconds after ``t0`` (wall clock of CreateCluster) of: instances recorded per group, each group's
    last node Running, and the cluster's status changes — read from the log after ``offset``."""
    out: dict[str, float] = {}
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        at = round(_stamp(m.group(1)) - t0, 3)
        msg = m.group(3)
        if (n := _NEW.match(msg)) and n.group(1) == cluster:
            out.setdefault(f"instances recorded ({n.group(2)})", at)
        elif r := _RUNNING.match(msg):
            out[f"last node Running ({r.group(2)})"] = at
        elif (s := _STATUS.match(msg)) and s.group(1) == cluster:
            out.setdefault(f"cluster {s.group(3)}", at)
    return out
