"""SSH sessions of the ``ssh`` provider: asyncssh on one private event-loop thread, and ``SshRunner``.

One connection per host is kept open and reused (reconnected when it drops). Host keys are pinned: the
first contact records the key the host offers (``hosts add``); afterwards only that key is accepted, and
a different one is refused (``HostKeyChanged``), never silently re-learnt.

Commands run as root: ``argv`` is quoted with ``shlex.join`` into a small POSIX-sh wrapper that sends the
command's output through files (a daemon started by the command may keep its stdio open; the channel
must close when the command itself exits) and, for a non-root login, through ``sudo -n``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shlex
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncssh

from slurmpod.providers.base import CommandResult, TemporaryProviderError
from slurmpod.providers.inflight import CommandCancelled, InFlight

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = {"PATH": NODE_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "LANG": "C.UTF-8",
            "SHELL": "/bin/bash"}
CONNECT_TIMEOUT = 8.0
#: stdout/stderr go to files; the channel closes when the command exits even if it left a daemon behind
_WRAPPER = ('d=$(mktemp -d) || exit 125; "$@" >"$d/o" 2>"$d/e"; rc=$?; '
            'cat "$d/o"; cat "$d/e" >&2; rm -rf "$d"; exit $rc')

T = TypeVar("T")


class SshError(TemporaryProviderError):
    """Base of SSH failures (all worth retrying elsewhere); ``kind`` names the failure for events/metrics."""

    kind = "ssh"


class HostUnreachable(SshError):
    kind = "unreachable"


class AuthFailed(SshError):
    kind = "auth"


class HostKeyChanged(SshError):
    kind = "host-key"


@dataclass(frozen=True)
class Target:
    """Where and how to log in; ``host_key`` is the pinned OpenSSH public key line ('' = first contact)."""

    name: str
    host: str
    port: int
    user: str
    key: str
    host_key: str = ""


def key_fingerprint(openssh_line: str) -> str:
    try:
        return str(asyncssh.import_public_key(openssh_line).get_fingerprint())
    except (asyncssh.KeyImportError, ValueError):
        return "?"


class _Client(asyncssh.SSHClient):
    """Checks the offered host key against the pinned one (or accepts and records it on first contact)."""

    def __init__(self, pinned: str) -> None:
        self.pinned = asyncssh.import_public_key(pinned) if pinned else None
        self.offered: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.offered = key
        return self.pinned is None or key == self.pinned


class SshSessions:
    """Connections to every host, owned by one daemon thread running a private asyncio loop."""

    def __init__(self, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        logging.getLogger("asyncssh").setLevel(logging.WARNING)  # INFO logs every channel
        self.connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._guard = threading.Lock()
        self._conns: dict[str, tuple[Target, asyncssh.SSHClientConnection]] = {}
        self._host_keys: dict[str, str] = {}

    # ---- loop ------------------------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="slurmpod-ssh", daemon=True).start()
                self._loop = loop
            return self._loop

    def call(self, make: Callable[[], Awaitable[T]], timeout: float,
             tracked: Callable[[Callable[[], None]], AbstractContextManager[None]] | None = None) -> T:
        """Runs the coroutine ``make()`` on the SSH thread and waits at most ``timeout`` seconds. ``tracked``
        (``InFlight.track`` of an instance): cancelling it cancels the coroutine (its SSH channel closes)."""
        async def wrapped() -> T:
            return await make()

        fut = asyncio.run_coroutine_threadsafe(wrapped(), self._ensure_loop())
        def cancel() -> None:
            fut.cancel()

        with tracked(cancel) if tracked is not None else nullcontext():
            try:
                return fut.result(timeout)
            except FutureTimeout as exc:
                fut.cancel()
                raise TemporaryProviderError(f"timed out after {timeout:.0f}s") from exc
            except FutureCancelled as exc:
                raise CommandCancelled("cancelled: the instance is being removed") from exc

    def close(self) -> None:
        async def close_all() -> None:
            for _, conn in list(self._conns.values()):
                conn.close()
            self._conns.clear()

        if self._loop is not None:
            self.call(close_all, 10)

    # ---- connections -----------------------------------------------------------------------------

    async def _connect(self, t: Target) -> asyncssh.SSHClientConnection:
        cached = self._conns.get(t.name)
        if cached is not None:
            old_target, conn = cached
            if old_target == t and not conn.is_closed():
                return conn
            conn.close()
            self._conns.pop(t.name, None)
        client = _Client(t.host_key)
        algs: Any = client.pinned.sig_algorithms if client.pinned is not None else ()
        try:
            conn, _ = await asyncio.wait_for(asyncssh.create_connection(
                lambda: client, t.host, port=t.port, username=t.user, client_keys=[t.key],
                known_hosts=b"", agent_path=None, password=None, kbdint_auth=False,
                server_host_key_algs=[a.decode() for a in algs] or "default",
                keepalive_interval=15, keepalive_count_max=3, config=[],
            ), self.connect_timeout)
        except asyncssh.HostKeyNotVerifiable as exc:
            offered = client.offered
            got = str(offered.get_fingerprint()) if offered is not None else "none"
            raise HostKeyChanged(
                f"host {t.name} offered a different SSH host key ({got}) than the one pinned at first contact "
                f"({key_fingerprint(t.host_key)}); refusing it. If the host was reinstalled on purpose: "
                f"slurmpod hosts remove {t.name} && slurmpod hosts add … again", delay=30) from exc
        except asyncssh.PermissionDenied as exc:
            raise AuthFailed(f"host {t.name} refused our key {t.key} for user {t.user} (permission denied)",
                             delay=30) from exc
        except (OSError, TimeoutError, asyncssh.Error) as exc:
            detail = str(exc) or type(exc).__name__
            raise HostUnreachable(f"host {t.name} is unreachable over SSH: {detail}", delay=15) from exc
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise AuthFailed(f"cannot use key {t.key} for host {t.name}: {exc}") from exc
        if client.offered is not None:
            self._host_keys[t.name] = client.offered.export_public_key("openssh").decode().split("\n")[0]
        self._conns[t.name] = (t, conn)
        return conn

    def pin(self, t: Target, timeout: float = 20.0) -> tuple[str, str]:
        """Connects (first contact when ``t.host_key`` is empty) and returns (host key line, peer IP)."""
        async def go() -> tuple[str, str]:
            conn = await self._connect(t)
            peer = conn.get_extra_info("peername")
            key = " ".join(self._host_keys.get(t.name, t.host_key).split()[:2])
            return key, str(peer[0]) if peer else t.host

        return self.call(go, timeout)

    def forget(self, name: str) -> None:
        async def drop() -> None:
            cached = self._conns.pop(name, None)
            if cached is not None:
                cached[1].close()

        if self._loop is not None:
            self.call(drop, 10)

    def run(self, t: Target, argv: Sequence[str], *, timeout: float, input: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            tracked: Callable[[Callable[[], None]], AbstractContextManager[None]] | None = None) -> CommandResult:
        """Runs ``argv`` as root on the host; ``TemporaryProviderError`` on timeout or lost connection."""
        command = remote_command(t.user, argv, env, cwd)

        async def go() -> CommandResult:
            conn = await self._connect(t)
            try:
                proc = await conn.run(command, input=input, encoding=None, timeout=timeout, check=False)
            except asyncssh.TimeoutError as exc:
                raise TemporaryProviderError(f"timed out after {timeout}s on {t.name}: {shlex.join(argv)}") from exc
            except (asyncssh.Error, OSError) as exc:
                self._conns.pop(t.name, None)
                conn.close()
                raise HostUnreachable(f"lost the SSH connection to {t.name}: {exc}") from exc
            out = proc.stdout if isinstance(proc.stdout, bytes) else b""
            err = proc.stderr if isinstance(proc.stderr, bytes) else b""
            code = proc.exit_status if proc.exit_status is not None else 255
            return CommandResult(code, out.decode(errors="replace"), err.decode(errors="replace"))

        return self.call(go, timeout + self.connect_timeout + 5, tracked)


def remote_command(user: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
                   cwd: str | None = None) -> str:
    """The command line sent to the remote shell: env + optional cwd + argv, through the output wrapper."""
    if not argv:
        raise ValueError("empty argv")
    full_env = dict(BASE_ENV)
    full_env.update(env or {})
    inner = ["env", *(["-C", cwd] if cwd else []), "--", *(f"{k}={v}" for k, v in full_env.items()), *argv]
    cmd = ["sh", "-c", _WRAPPER, "slurmpod", *inner]
    if user != "root":
        cmd = ["sudo", "-n", "--", *cmd]
    return shlex.join(cmd)


class SshRunner:
    """``CommandRunner`` for one ssh host. ``before`` (optional) rewrites argv (file tracking)."""

    def __init__(self, sessions: SshSessions, target: Callable[[], Target],
                 before: Callable[[Sequence[str]], Sequence[str]] | None = None,
                 known_hosts: Callable[[], str] | None = None,
                 inflight: tuple[InFlight, str] | None = None) -> None:
        self._sessions = sessions
        self._target = target
        self._before = before
        self._known_hosts = known_hosts
        self._inflight = inflight

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
        tracked = None
        if self._inflight is not None:
            registry, instance_id = self._inflight
            registry.check(instance_id)
            tracked = functools.partial(registry.track, instance_id)
        t = self._target()
        real = self._before(argv) if self._before is not None else argv
        return self._sessions.run(t, real, timeout=timeout, input=input, env=env, cwd=cwd, tracked=tracked)

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        t = self._target()
        known_hosts = self._known_hosts() if self._known_hosts is not None else ""
        opts = ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
        if known_hosts:
            opts += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        inner = ["env", f"PATH={NODE_PATH}", "HOME=/root", *argv]
        if t.user != "root":
            inner = ["sudo", "-n", "--", *inner]
        tty = ["-t"] if os.isatty(0) else ["-T"]
        return ["ssh", *tty, "-q", "-i", t.key, "-p", str(t.port), *opts, f"{t.user}@{t.host}", "--",
                shlex.join(inner)]
