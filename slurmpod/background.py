"""Where a server's background work runs: its reconciler, its lease keeper and its nodes' host-side services.

``InProcess``: on threads of the API's own process (one server on SQLite; the tests' in-process servers).

``ReconcilerProcess``: in a child process of the server (the default on a shared PostgreSQL database). Python runs
one thread of a process at a time: a reconciler busy booting thousands of nodes holds the interpreter for up to
``sys.getswitchinterval()`` each time an API thread wants it back, several times per request, and the API's answers
queue behind it (scenario 10 of ``bench``, 2 servers booting 1,000 x 20 nodes under 50 polling clients:
DescribeCluster p99 87-97 ms in one process, 22-24 ms with the reconciler in a child, which also booted the nodes
sooner: 32-33 s against 38-39 s). The child is the same composition (``slurmpod.server.reconciler_main``) with
its own store connections; the two talk over a pipe: the API wakes the reconciler after a change, and asks it for
``/readyz`` (running, owned clusters) and for its ``/metrics`` instruments (``metrics.RECONCILER_FAMILIES``).

The child dies with its parent (``PR_SET_PDEATHSIG``): a server killed with SIGKILL loses its reconciler too, and
its clusters are taken over when their leases expire, as before. A clean stop asks the child to hand its clusters
over and waits for it. A child that exits on its own (a crash) is started again, with the same replica id, after
``RESTART_DELAY`` seconds: it frees its previous leases and takes them again (``Ownership.start``).
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from typing import Any, Protocol

from slurmpod.reconciler.loop import Reconciler
from slurmpod.reconciler.ownership import Ownership

log = logging.getLogger("slurmpod.background")

START_TIMEOUT = 120.0  # seconds the child may take to build its runtime and start (a local provider checks the host)
ASK_TIMEOUT = 5.0  # seconds a question (ready, detail, metrics) waits for the child's answer
STOP_TIMEOUT = 60.0  # seconds a clean stop waits for the child to hand its clusters over
RESTART_DELAY = 1.0
_PR_SET_PDEATHSIG = 1


class Background(Protocol):
    def start(self) -> None: ...

    def wake(self) -> None: ...

    def running(self) -> bool: ...

    def detail(self) -> dict[str, Any]: ...

    def metrics(self) -> bytes | None:
        """The reconciler's instruments rendered elsewhere (None: they are this process's own)."""
        ...

    def hand_over(self) -> None: ...


class InProcess:
    """The reconciler, the lease keeper (several servers) and the node services on threads of this process."""

    def __init__(self, reconciler: Reconciler, runtime: object, ownership: Ownership | None = None) -> None:
        self.reconciler = reconciler
        self.runtime = runtime
        self.ownership = ownership

    def start(self) -> None:
        if self.ownership is not None:  # several servers share the local nodes: IMDS follows the leases
            self.node_services("serve_only", self.ownership.owns)
        self.node_services("start_services")
        warm = getattr(self.runtime, "warm", None)  # a SlurmRuntime: the first accounting host's database
        if callable(warm):
            warm()
        if self.ownership is not None:
            self.ownership.start()
        self.reconciler.start()

    def wake(self) -> None:
        self.reconciler.wake()

    def running(self) -> bool:
        return self.reconciler.running()

    def detail(self) -> dict[str, Any]:
        return self.ownership.detail() if self.ownership is not None else {}

    def metrics(self) -> bytes | None:
        return None

    def hand_over(self) -> None:
        """Stops reconciling and hands the clusters to the other servers at once (not after their leases expire).
        The lease keeper keeps renewing, and takes nothing new, until the reconciler's in-flight work has ended."""
        if self.ownership is not None:
            self.ownership.drain()
        self.reconciler.stop()
        if self.ownership is not None:
            self.ownership.stop()
            self.ownership.release_all()
        self.node_services("close")

    def node_services(self, method: str, *args: object) -> None:
        """Host-side services of the nodes (the local provider's package proxy and IMDS): started with the
        reconciler, stopped after it, following this server's leases. The local provider may sit inside an ssh
        ``PooledProvider``."""
        provider = getattr(self.runtime, "provider", None)
        call = getattr(getattr(provider, "local", provider), method, None)
        if callable(call):
            try:
                call(*args)
            except Exception:
                log.exception("node services: %s failed", method)


class BackgroundFailed(RuntimeError):
    """The reconciler process could not start (its message says why)."""


#: the child's entry point: ``(settings, connection)``; it builds an ``InProcess`` and calls ``serve_parent``
ChildMain = Callable[[Any, Connection], None]


class ReconcilerProcess:
    """The parent's side of a reconciler child process (see the module docstring)."""

    def __init__(self, target: ChildMain, settings: Any, *, nice: int = 0) -> None:
        self._target = target
        self._settings = settings
        self._nice = nice
        self._lock = threading.Lock()  # guards ``_conn``/``_proc`` and each send (held briefly)
        self._asking = threading.Lock()  # one question (send, then wait for its answer) at a time
        self._seq = itertools.count(1)
        self._conn: Connection | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="slurmpod-reconciler-watch", daemon=True)
        self._watcher.start()

    def _spawn(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this one's threads or locks
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(self._target, self._settings, theirs, self._nice),
                           name="slurmpod-reconciler", daemon=False)
        proc.start()
        theirs.close()
        try:
            if not mine.poll(START_TIMEOUT):
                raise BackgroundFailed(f"the reconciler process did not start within {START_TIMEOUT:.0f} s")
            kind, message = mine.recv()
        except (EOFError, OSError):
            kind, message = "failed", f"the reconciler process exited ({proc.exitcode}) while starting"
        except BackgroundFailed as exc:
            kind, message = "failed", str(exc)
        if kind != "started":
            proc.kill()
            proc.join(10)
            mine.close()
            raise BackgroundFailed(message)
        with self._lock:
            self._conn, self._proc = mine, proc
        log.info("reconciler process %d started%s", proc.pid, f" (nice {self._nice})" if self._nice else "")

    def _watch(self) -> None:
        """Starts the child again if it exits on its own."""
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            proc.join()
            if self._stopping.is_set():
                return
            log.error("the reconciler process %d exited (code %s); starting it again in %.0f s", proc.pid,
                      proc.exitcode, RESTART_DELAY)
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
            if self._stopping.wait(RESTART_DELAY):
                return
            try:
                self._spawn()
            except BackgroundFailed as exc:
                log.error("%s; trying again", exc)

    def wake(self) -> None:
        with self._lock:
            if self._conn is None or self._stopping.is_set():
                return
            try:
                self._conn.send((0, "wake"))
            except OSError:
                pass  # the child is gone: the watcher starts it again, and its first pass plans everything

    def _ask(self, what: str, timeout: float = ASK_TIMEOUT) -> Any:
        """The child's answer to ``what``, or None when it has none in time (an answer that comes later is
        dropped by the next question: each carries its number). Only questions wait for the child: a wake
        (an API write) never waits behind one."""
        with self._asking:
            with self._lock:
                conn = self._conn
                if conn is None or self._stopping.is_set():
                    return None
                seq = next(self._seq)
                try:
                    conn.send((seq, what))
                except OSError:
                    return None
            deadline = time.monotonic() + timeout
            try:
                while conn.poll(max(0.0, deadline - time.monotonic())):
                    got, value = conn.recv()
                    if got == seq:
                        return value
            except (EOFError, OSError):
                return None
            return None

    def running(self) -> bool:
        return bool(self._ask("running"))

    def detail(self) -> dict[str, Any]:
        value = self._ask("detail")
        return value if isinstance(value, dict) else {"reconciler": "not answering"}

    def metrics(self) -> bytes | None:
        value = self._ask("metrics")
        return value if isinstance(value, bytes) else b""

    def hand_over(self) -> None:
        """Asks the child to hand its clusters over and exit; waits for it (``STOP_TIMEOUT``), then kills it.
        Meanwhile the server is not ready (``running``) and wakes go nowhere."""
        self._stopping.set()
        with self._lock:
            proc, conn = self._proc, self._conn
            if conn is not None:
                try:
                    conn.send((next(self._seq), "stop"))
                except OSError:
                    pass
        if proc is None:
            return
        # only the watcher joins (reaps) the child: two threads waiting for one pid may each miss its exit
        if not wait_for([proc.sentinel], STOP_TIMEOUT):
            log.error("the reconciler process %d did not stop within %.0f s; killing it", proc.pid, STOP_TIMEOUT)
            proc.kill()
        if self._watcher is not None:
            self._watcher.join(15)
        else:
            proc.join(10)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None


def _child(target: ChildMain, settings: Any, conn: Connection, nice: int) -> None:
    """The child's first steps: die with the parent, lower its priority, leave the signals to the parent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before the line above
        os._exit(1)
    # a terminal's Ctrl-C and a service manager's SIGTERM reach the whole process group: the parent decides
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if nice:
        os.nice(nice)
    target(settings, conn)


def serve_parent(background: InProcess, conn: Connection, render_metrics: Callable[[], bytes]) -> None:
    """The child's loop once ``background`` runs: answers the parent's questions until it says stop (then hands
    the clusters over) or goes away (then exits at once, as a killed server would)."""
    answers: dict[str, Callable[[], Any]] = {"running": background.running, "detail": background.detail,
                                             "metrics": render_metrics}
    conn.send(("started", None))
    while True:
        try:
            seq, what = conn.recv()
        except (EOFError, OSError):
            os._exit(1)
        if what == "wake":
            background.wake()
            continue
        if what == "stop":
            background.hand_over()
            conn.send((seq, True))
            return
        try:
            answer = answers[what]() if what in answers else None
        except Exception:
            log.exception("answering %s failed", what)
            answer = None
        conn.send((seq, answer))
