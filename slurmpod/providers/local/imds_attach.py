"""Which nodes this process serves instance metadata in (``imds.ImdsServer`` does the serving).

One server of a state dir: every live node, from the server's start (re-adoption) to its stop. Several servers on
one database sharing the state dir's nodes (issue 18): each serves only the nodes of the clusters it owns
(``serve_only``), and ``sync`` follows its leases — a node has a single 169.254.169.254:80 listener, so the
server that took a cluster over binds it (the dead owner's went with its process) and one that handed a cluster
back closes its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from slurmpod.providers.base import ProviderError
from slurmpod.providers.local import netns
from slurmpod.providers.local.imds import ImdsServer
from slurmpod.providers.local.imds_source import http_tokens, record_metadata
from slurmpod.providers.local.state import InstanceRecord

log = logging.getLogger("slurmpod.local")


class ImdsAttachments:
    def __init__(self, meta_of: Callable[[InstanceRecord], Path]) -> None:
        self._meta_of = meta_of
        self._guard = threading.Lock()
        self._server: ImdsServer | None = None
        #: only the long-lived owner of the nodes (the server, through ``start``) turns it on: short-lived users
        #: (connect, demo) must not take the listeners
        self.on = False
        self.serves: Callable[[str], bool] = lambda _cluster_id: True

    def attach(self, rec: InstanceRecord, *, required: bool) -> None:
        """Serves the node's IMDS (idempotent). ``required``: a failure fails the launch; otherwise (a reboot,
        a re-adoption) it is logged and the node runs without IMDS until its next attach."""
        if not self.on:
            return
        with self._guard:
            if self._server is None:
                self._server = ImdsServer()
            server = self._server
        try:
            server.attach(rec.instance_id, netns.netns_path(rec.netns), record_metadata(self._meta_of(rec), rec),
                          http_tokens=http_tokens(rec))
        except ProviderError as exc:
            if required:
                raise
            log.warning("instance metadata unavailable in %s: %s", rec.instance_id, exc)

    def detach(self, instance_id: str) -> None:
        if self._server is not None:
            self._server.detach(instance_id)

    def start(self, live: Iterable[InstanceRecord]) -> None:
        """Serves IMDS from now on: in the ``live`` instances this process serves, and in every instance
        launched, rebooted or given a new root volume later."""
        self.on = True
        self.sync(live)

    def sync(self, live: Iterable[InstanceRecord]) -> None:
        """After an ownership change: listeners in the served clusters' live nodes, none in the others."""
        if not self.on:
            return
        attached = set(self._server.attached()) if self._server is not None else set()
        for rec in live:
            if self.serves(rec.cluster_id):
                if rec.instance_id not in attached:
                    self.attach(rec, required=False)
            elif rec.instance_id in attached:
                self.detach(rec.instance_id)

    def close(self) -> None:
        """Stops serving instance metadata (nodes keep running; ``start`` serves them again)."""
        self.on = False
        if self._server is not None:
            self._server.close()
