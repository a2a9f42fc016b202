"""The API first: background work (the reconciler's loop, workers and health threads) lets a request in flight
finish before its next store call.

The reconciler runs in the API's process, and Python runs one thread at a time: a worker busy in Python when a
request releases the interpreter (every SQLite call does) keeps it for up to ``sys.getswitchinterval()`` (5 ms),
several times per request. ``ApiGate`` counts the requests in flight; ``YieldingStore`` (the reconciler's view of
the store) waits, before each store call, until none is, but never longer than ``MAX_WAIT`` per call, so
background work is delayed, never stopped, however busy the API is.
"""

from __future__ import annotations

import threading
from typing import Any

MAX_WAIT = 0.010  # seconds a store call of background work waits for the requests in flight, at most


class ApiGate:
    """Requests in flight (``enter``/``leave`` around each); ``wait`` returns once there are none, or after
    ``timeout`` seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = threading.Event()
        self._idle.set()

    def enter(self) -> None:
        with self._lock:
            self._busy += 1
            self._idle.clear()

    def leave(self) -> None:
        with self._lock:
            self._busy -= 1
            if self._busy <= 0:
                self._busy = 0
                self._idle.set()

    def busy(self) -> int:
        return self._busy

    def wait(self, timeout: float = MAX_WAIT) -> bool:
        """True when no request is in flight (at once or within ``timeout``)."""
        return self._idle.is_set() or self._idle.wait(timeout)


class YieldingStore:
    """``store`` whose every method first waits for ``gate`` (bounded, ``MAX_WAIT``); attributes pass through."""

    def __init__(self, store: Any, gate: ApiGate) -> None:
        self._store = store
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr
        wait = self._gate.wait

        def call(*args: Any, **kwargs: Any) -> Any:
            wait()
            return attr(*args, **kwargs)

        call.__name__ = name
        self.__dict__[name] = call  # found directly from now on
        return call
