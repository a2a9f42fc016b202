"""The audit trail's use cases: record a call, look calls up for one account and region, prune old ones.

Recording never fails the call it records: a store error is logged and the call's answer stands (CloudTrail,
too, delivers asynchronously). A call that changed something is recorded before its answer is sent (durable when
the client sees it); the record of a call that changed nothing (a read, a refused or failed call) is queued and
written by a background writer, in batches (within ``LINGER`` seconds of the call): the answer does not wait for
a commit it does not need. ``lookup`` first waits for the queue, so this server's LookupEvents sees every call it
answered; ``close`` (the server's stop) writes what is queued. A crash (kill -9) can lose the queued records of the
last ``LINGER`` seconds' reads, never a change's. Records older than the retention (default 90 days, CloudTrail's
event history) are pruned at start and then at most once an hour, while recording.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from slurmpod.clock import Clock
from slurmpod.domain.audit import DEFAULT_RETENTION_DAYS, AuditRecord
from slurmpod.store.audit import AuditFilter, AuditLog

log = logging.getLogger("slurmpod.audit")

PRUNE_EVERY = 3600.0
#: the writer lets queued records gather this long before writing them (one transaction per batch, one wake-up of
#: its thread per batch instead of per read: a read-heavy client's records were written one by one) ...
LINGER = 0.2
#: ... or until this many are queued
BATCH = 256


class AuditService:
    def __init__(self, log_: AuditLog, clock: Clock, *, retention_days: float = DEFAULT_RETENTION_DAYS,
                 idle: Callable[[], object] = lambda: None) -> None:
        """``idle``: returns once no API request is in flight, or after a short while (``ApiGate.wait``): the
        writer calls it before each batch, so its write transaction does not make a request's wait."""
        if retention_days <= 0:
            raise ValueError("audit retention must be a positive number of days")
        self.log = log_
        self.clock = clock
        self.retention = retention_days * 86400.0
        self._lock = threading.Lock()
        self._last_prune = float("-inf")
        self._queue: list[Callable[[], AuditRecord]] = []  # records of calls that changed nothing, to write
        self._writing = 0  # records taken by the writer and not yet written
        self._changed = threading.Condition()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._idle = idle
        self._flushing = 0  # callers waiting in ``flush``: the writer does not wait for idle then
        self._sleeping = False  # the writer waits for a first record: ``enqueue`` wakes it (else it lingers)

    def record(self, rec: AuditRecord) -> None:
        """Writes ``rec`` now (committed when this returns): for a call that changed something."""
        try:
            self.log.add(rec)
        except Exception:  # the call's answer must not depend on its audit record
            log.exception("could not record audit event %s (%s)", rec.event_id, rec.event_name)
        self.maybe_prune()

    def enqueue(self, make: Callable[[], AuditRecord]) -> None:
        """Queues the record ``make`` builds for the background writer (for a call that changed nothing), which
        builds and writes it; never blocks on the store. After ``close``, builds and writes it now."""
        with self._changed:
            if not self._closed:
                self._queue.append(make)
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write_queued, name="slurmpod-audit", daemon=True)
                    self._writer.start()
                if self._sleeping or len(self._queue) >= BATCH:
                    self._changed.notify_all()
                return
        self._write([make])

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until every record queued before this call is written (False if ``timeout`` passed first)."""
        with self._changed:
            self._flushing += 1
            self._changed.notify_all()
            try:
                return self._changed.wait_for(lambda: not self._queue and not self._writing, timeout)
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Writes what is queued and stops the writer; later records are written at once."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            writer = self._writer
        if writer is not None:
            writer.join(timeout=30)

    def _write_queued(self) -> None:
        while True:
            with self._changed:
                self._sleeping = True
                self._changed.wait_for(lambda: self._queue or self._closed)
                self._sleeping = False
                self._changed.wait_for(lambda: self._closed or self._flushing > 0 or len(self._queue) >= BATCH,
                                       LINGER)
                hurry = self._closed or self._flushing > 0
            if not hurry:
                self._idle()
            with self._changed:
                batch, self._queue = self._queue, []
                self._writing = len(batch)
                if not batch and self._closed:
                    return
            try:
                self._write(batch)
            finally:
                with self._changed:
                    self._writing = 0
                    self._changed.notify_all()

    def _write(self, batch: list[Callable[[], AuditRecord]]) -> None:
        """Builds and writes ``batch`` in one transaction (whatever queued up meanwhile); never raises."""
        recs: list[AuditRecord] = []
        for make in batch:
            try:
                recs.append(make())
            except Exception:  # one record that cannot be built loses only itself
                log.exception("could not build an audit record")
        try:
            self.log.add_many(recs)
        except Exception:
            log.exception("could not record %d audit events", len(recs))
        self.maybe_prune()

    def maybe_prune(self) -> None:
        now = self.clock.now()
        with self._lock:
            if now - self._last_prune < PRUNE_EVERY:
                return
            self._last_prune = now
        try:
            gone = self.log.prune(now - self.retention)
            if gone:
                log.info("pruned %d audit events older than %.0f days", gone, self.retention / 86400)
        except Exception:
            log.exception("pruning the audit trail failed")

    def lookup(self, f: AuditFilter, *, cursor: tuple[float, int] | None, limit: int) -> list[AuditRecord]:
        """One page, newest first; ``f.account_id`` must be the caller's (the API layer sets it). Includes every
        call this server answered before (the queued records are written first)."""
        self.flush()
        oldest = self.clock.now() - self.retention
        start = oldest if f.start is None else max(f.start, oldest)
        return self.log.page(replace(f, start=start), cursor=cursor, limit=limit)
