"""The audit trail's use cases: record a call, look calls up for one account and region, prune old ones.

Recording never fails the call it records: a store error is logged and the call's answer stands (CloudTrail,
too, delivers asynchronously). Records older than the retention (default 90 days, CloudTrail's event history) are
pruned at start and then at most once an hour, while recording.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from slurmpod.clock import Clock
from slurmpod.domain.audit import DEFAULT_RETENTION_DAYS, AuditRecord
from slurmpod.store.audit import AuditFilter, AuditLog

log = logging.getLogger("slurmpod.audit")

PRUNE_EVERY = 3600.0


class AuditService:
    def __init__(self, log_: AuditLog, clock: Clock, *, retention_days: float = DEFAULT_RETENTION_DAYS) -> None:
        if retention_days <= 0:
            raise ValueError("audit retention must be a positive number of days")
        self.log = log_
        self.clock = clock
        self.retention = retention_days * 86400.0
        self._lock = threading.Lock()
        self._last_prune = float("-inf")

    def record(self, rec: AuditRecord) -> None:
        try:
            self.log.add(rec)
        except Exception:  # the call's answer must not depend on its audit record
            log.exception("could not record audit event %s (%s)", rec.event_id, rec.event_name)
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
        """One page, newest first; ``f.account_id`` must be the caller's (the API layer sets it)."""
        oldest = self.clock.now() - self.retention
        start = oldest if f.start is None else max(f.start, oldest)
        return self.log.page(replace(f, start=start), cursor=cursor, limit=limit)
