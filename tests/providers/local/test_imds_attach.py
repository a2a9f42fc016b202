"""Which nodes a server serves IMDS in: all of them alone, only its clusters' with several servers (issue 18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmpod.providers.local.imds_attach import ImdsAttachments
from slurmpod.providers.local.state import InstanceRecord


class Recording(ImdsAttachments):
    def __init__(self) -> None:
        super().__init__(lambda rec: Path("/nonexistent"))
        self.now: set[str] = set()

    def attach(self, rec: InstanceRecord, *, required: bool) -> None:
        if self.on:
            self.now.add(rec.instance_id)

    def detach(self, instance_id: str) -> None:
        self.now.discard(instance_id)


class _Attached:
    def __init__(self, owner: Recording) -> None:
        self.owner = owner

    def attached(self) -> list[str]:
        return sorted(self.owner.now)


def _rec(cluster: str, instance: str) -> Any:
    class R:
        cluster_id = cluster
        instance_id = instance

    return R()


def test_listeners_follow_the_owned_clusters() -> None:
    a = Recording()
    a._server = _Attached(a)  # type: ignore[assignment]
    live = [_rec("c1", "i-1"), _rec("c2", "i-2")]
    a.sync(live)
    assert a.now == set()  # not started (connect, demo): no listener
    owned = {"c1"}
    a.serves = lambda cid: cid in owned
    a.start(live)
    assert a.now == {"i-1"}
    owned = {"c2"}  # c1 handed back, c2 taken over
    a.sync(live)
    assert a.now == {"i-2"}
    a.serves = lambda cid: True  # one server alone: every node
    a.sync(live)
    assert a.now == {"i-1", "i-2"}
