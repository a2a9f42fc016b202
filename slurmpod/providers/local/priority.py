"""The host's default CPU priority for what the local provider starts.

A server may run its reconciler niced (``slurmpod server --reconciler-nice``, in its own process) so that its API
answers first on a busy machine. What the reconciler starts for the nodes must not inherit that: the nodes
themselves (their init and everything under it, users' jobs included), the commands and lifecycle scripts run in
them, their package proxy and container registry run at the priority they would have without slurmpod.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def at_host_priority(argv: Sequence[str]) -> list[str]:
    """``argv``, run through ``nice`` back to niceness 0 when this thread runs niced (root may lower it)."""
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness <= 0 or os.geteuid() != 0:
        return list(argv)
    return ["nice", "-n", str(-niceness), "--", *argv]


#: an autogroup's niceness: the kernel shares the CPU between sessions first (``sched_autogroup_enabled``), so a
#: process's own niceness only ranks it inside its session
_IDLE_SESSION = 'echo 19 > /proc/self/autogroup 2>/dev/null; exec nice -n 19 ionice -c 3 "$@"'


def when_idle(argv: Sequence[str]) -> list[str]:
    """``argv`` run only with CPU and disk time nothing else wants: a session of its own (``setsid``) whose
    autogroup and process are at niceness 19, in the idle I/O class."""
    return ["setsid", "--wait", "sh", "-c", _IDLE_SESSION, "sh", *argv]
