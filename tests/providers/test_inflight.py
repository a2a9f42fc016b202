"""Cancelling the commands of an instance being removed: the registry, and the local runner on a real command."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from slurmpod.providers.inflight import CommandCancelled, InFlight


def test_cancel_stops_the_running_commands_and_refuses_later_ones() -> None:
    reg = InFlight()
    stopped: list[str] = []
    with reg.track("i-1", lambda: stopped.append("a")), reg.track("i-2", lambda: stopped.append("other")):
        assert reg.running("i-1") == 1
        assert reg.cancel("i-1") == 1
        assert stopped == ["a"]  # only that instance's
    assert reg.running("i-1") == 0
    with pytest.raises(CommandCancelled, match="i-1 is being removed"):
        reg.check("i-1")
    reg.check("i-2")
    # a command registered after the cancel is stopped at once (the race between check and track)
    with reg.track("i-1", lambda: stopped.append("late")):
        pass
    assert stopped == ["a", "late"]
    reg.forget("i-1")  # terminated: the mark goes
    reg.check("i-1")
    assert reg.cancel("i-9") == 0


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nsenter") is None, reason="needs root and nsenter")
def test_a_local_command_is_ended_by_a_cancel() -> None:
    """LocalRunner (nsenter into this process's own namespaces): a long command returns as soon as it is
    cancelled, with CommandCancelled; the next command of the instance is refused without running."""
    from slurmpod.providers.local.runner import LocalRunner

    reg = InFlight()
    runner = LocalRunner(os.getpid, inflight=(reg, "i-1"))
    assert runner.run(["true"], timeout=10).returncode == 0
    t0 = time.monotonic()
    timer = threading.Timer(0.5, reg.cancel, args=("i-1",))
    timer.start()
    try:
        with pytest.raises(CommandCancelled):
            runner.run(["sleep", "30"], timeout=60)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 10
    with pytest.raises(CommandCancelled):
        runner.run(["true"], timeout=10)
