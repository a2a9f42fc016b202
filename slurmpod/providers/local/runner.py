"""``CommandRunner`` for local nodes: ``nsenter`` into all of the holder's namespaces."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence

from slurmpod.providers.base import CommandResult, TemporaryProviderError
from slurmpod.providers.inflight import InFlight
from slurmpod.providers.local.priority import at_host_priority

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": NODE_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "LANG": "C.UTF-8",
            "SHELL": "/bin/bash"}


def nsenter_argv(holder_pid: int) -> list[str]:
    """Enter net, UTS, IPC, mount (pivoted root), PID and cgroup namespaces of the node."""
    return ["nsenter", "-t", str(holder_pid), "-n", "-u", "-i", "-m", "-p", "-C"]


class LocalRunner:
    """Runs argv lists inside one node as root.

    ``resolve`` returns the node's current holder PID (it changes on reboot) or raises
    ``TemporaryProviderError`` when the node is not running; ``systemd`` (optional) says whether the node's image
    boots systemd (None: unknown), so callers need no command in the node to find out. ``inflight`` (the
    provider's registry and this node's instance id): its commands can be cancelled (``InFlight.cancel``).
    """

    def __init__(self, resolve: Callable[[], int], systemd: Callable[[], bool | None] | None = None,
                 inflight: tuple[InFlight, str] | None = None) -> None:
        self._resolve = resolve
        self._systemd = systemd
        self._inflight = inflight

    def runs_systemd(self) -> bool | None:
        return self._systemd() if self._systemd is not None else None

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        if not argv:
            raise ValueError("empty argv")
        if self._inflight is not None:
            self._inflight[0].check(self._inflight[1])
        pid = self._resolve()
        full_env = dict(BASE_ENV)
        full_env.update(env or {})
        inner = ["env", "-C", cwd, "--", *argv] if cwd else list(argv)
        cmd = [*nsenter_argv(pid), "--", *inner]
        # Output goes to files, not pipes: a daemon started by the command may keep its stdio open,
        # and we must return when the command itself exits.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(at_host_priority(cmd),
                                    stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                    stdout=out, stderr=err, env=full_env, cwd="/", start_new_session=True)
            with self._tracked(proc):
                try:
                    proc.communicate(input=input, timeout=timeout)
                except subprocess.TimeoutExpired as exc:
                    _kill_group(proc)
                    raise TemporaryProviderError(f"timed out after {timeout}s in node: {' '.join(argv)}") from exc
                except BrokenPipeError:  # cancelled while its input was being written
                    _kill_group(proc)  # (a bounded wait for nsenter)
            if self._inflight is not None:
                self._inflight[0].check(self._inflight[1])  # cancelled: its result means nothing
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode(errors="replace")
            stderr = err.read().decode(errors="replace")
        if proc.returncode != 0 and stderr.startswith("nsenter:"):
            # The node vanished between resolve() and nsenter (e.g. killed): not the command's failure.
            raise TemporaryProviderError(f"node unreachable: {stderr.strip()}")
        return CommandResult(returncode=proc.returncode, stdout=stdout, stderr=stderr)

    def _tracked(self, proc: subprocess.Popen[bytes]) -> contextlib.AbstractContextManager[None]:
        if self._inflight is None:
            return contextlib.nullcontext()
        return self._inflight[0].track(self._inflight[1], lambda: _signal_group(proc))

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        pid = self._resolve()
        env = [f"{k}={v}" for k, v in (("PATH", NODE_PATH), ("HOME", "/root"))]
        return [*nsenter_argv(pid), "--", "env", *env, *argv]


def _pgrp(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return 0


def _signal_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the command nsenter forked inside the node and its process group, not to nsenter itself
    (it reaps its child and exits); does not wait. (Orphans of a killed nsenter would go to the *host's* init.)"""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != proc.pid and _pgrp(int(entry)) == proc.pid:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """``_signal_group``, then waits for nsenter (killed too if it does not exit)."""
    _signal_group(proc)
    try:
        proc.wait(2)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
