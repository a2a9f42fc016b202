"""Commands running in instances, so that an instance being removed has its commands ended at once.

A lifecycle script may run for up to its timeout (30 minutes); a cluster deleted meanwhile must not wait for it.
Each runner registers the command it runs under the instance id, with a way to stop it (the local provider kills
the command's process group inside the node, the ssh provider cancels the SSH channel). ``cancel(instance)``
stops those and refuses every later command of that instance (``CommandCancelled``) until ``forget(instance)``
(its termination): a boot between two commands stops at its next one instead of starting it.

A command registered just after a ``cancel`` sees the mark and is stopped at once: ``cancel`` marks first, then
stops what is registered; ``track`` registers first, then looks at the mark.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator

from slurmpod.providers.base import TemporaryProviderError


class CommandCancelled(TemporaryProviderError):
    """The instance's commands were cancelled: it is being removed."""


class InFlight:
    """The commands each instance runs now, and the instances whose commands are cancelled (thread safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, dict[int, Callable[[], None]]] = {}
        self._cancelled: set[str] = set()
        self._tokens = itertools.count()

    def check(self, instance_id: str) -> None:
        """Raises ``CommandCancelled`` when the instance's commands are cancelled."""
        if instance_id in self._cancelled:
            raise CommandCancelled(f"instance {instance_id} is being removed: its commands are cancelled")

    @contextlib.contextmanager
    def track(self, instance_id: str, stop: Callable[[], None]) -> Iterator[None]:
        """While the block runs, ``cancel(instance_id)`` calls ``stop`` (which must not block); called at once if
        the instance is cancelled already. After the block, ``check`` tells the caller whether it was."""
        token = next(self._tokens)
        with self._lock:
            self._running.setdefault(instance_id, {})[token] = stop
            cancelled = instance_id in self._cancelled
        try:
            if cancelled:
                stop()
            yield
        finally:
            with self._lock:
                running = self._running.get(instance_id, {})
                running.pop(token, None)
                if not running:
                    self._running.pop(instance_id, None)

    def cancel(self, instance_id: str) -> int:
        """Stops the instance's running commands and refuses its later ones; how many were running."""
        with self._lock:
            self._cancelled.add(instance_id)
            stops = list(self._running.get(instance_id, {}).values())
        for stop in stops:
            stop()
        return len(stops)

    def forget(self, instance_id: str) -> None:
        """The instance is gone: its mark goes too (instance ids are never reused)."""
        with self._lock:
            self._cancelled.discard(instance_id)

    def running(self, instance_id: str) -> int:
        with self._lock:
            return len(self._running.get(instance_id, {}))
