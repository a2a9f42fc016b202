"""Injected faults, as a node sees them: one JSON file per active fault in ``FAULT_DIR``.

``slurmpod faults inject`` writes ``/run/slurmpod/faults/<kind>`` (``{"kind": ..., "gpu": 0, "xid": 79, ...}``)
and applies the fault's effect (kills the processes holding a GPU, removes a device, stops slurmd, ...); the
health checks read the markers to see what real hardware would show (an Xid in the kernel log, a GPU gone from
``nvidia-smi``). ``/run`` is a tmpfs: a reboot clears them, a replacement never has them.
"""

from __future__ import annotations

import json
import os

# typing is not imported at run time: the health agent is resident in every compute node
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FAULT_DIR = "/run/slurmpod/faults"
#: what each kind is and what a healthy node would need: "replace" or "reboot" (HyperPod's Action:Replace/Reboot)
KINDS: dict[str, tuple[str, str]] = {
    "gpu-xid": ("a GPU reports Xid 79 (fallen off the bus): its processes die, the GPU check fails", "replace"),
    "gpu-lost": ("a GPU disappears from the node (its device is gone)", "replace"),
    "slurmd-hang": ("slurmd stops answering (SIGSTOP)", "reboot"),
    "node-crash": ("the node's kernel is gone: every process of the host dies at once", "replace"),
    "network-partition": ("the node's network link goes down", "reboot"),
}


def active(root: str = "/") -> dict[str, dict[str, Any]]:
    """The faults marked in the node whose root is ``root``: kind -> marker contents (``{}`` if unreadable)."""
    d = os.path.join(root, FAULT_DIR.lstrip("/"))
    out: dict[str, dict[str, Any]] = {}
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return out
    for name in names:
        if name not in KINDS:
            continue
        try:
            with open(os.path.join(d, name)) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        out[name] = data if isinstance(data, dict) else {}
    return out
