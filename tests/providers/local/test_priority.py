"""What the local provider starts runs at the host's default CPU priority, also when the reconciler that starts it
runs niced (``slurmpod server --reconciler-nice``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slurmpod.providers.local.priority import at_host_priority

PROBE = ("import os, subprocess, sys; from slurmpod.providers.local.priority import at_host_priority; "
         "os.nice(int(sys.argv[1])); "
         "print(subprocess.run(at_host_priority(['nice']), capture_output=True, text=True, timeout=10).stdout.strip())")


def test_unniced_argv_is_left_alone() -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) == 0:
        assert at_host_priority(["true", "x"]) == ["true", "x"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may lower a niceness")
@pytest.mark.parametrize("niceness", [3, 10, 19])
def test_a_niced_caller_starts_commands_at_niceness_0(niceness: int) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(niceness)], capture_output=True, text=True, timeout=30,
                         check=True).stdout.strip()
    assert out == "0"


def test_when_idle_runs_in_a_session_of_its_own_at_the_lowest_priority() -> None:
    """The kernel shares the CPU between sessions first (autogroups): a niced process in the caller's session would
    still take the session's share, so the idle work gets a session, and an autogroup niceness, of its own."""
    from slurmpod.providers.local.priority import when_idle

    probe = 'echo "$(nice) $(ionice) $(cut -d" " -f3 /proc/self/autogroup 2>/dev/null) $(ps -o sid= -p $$)"'
    out = subprocess.run(when_idle(["sh", "-c", probe]), capture_output=True, text=True, timeout=30,
                         check=True).stdout.split()
    assert out[0] == "19" and out[1] == "idle"
    if os.path.exists("/proc/self/autogroup"):
        assert out[2] == "19"
    assert int(out[-1]) != os.getsid(0)
