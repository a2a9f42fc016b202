"""``AuditLog.add`` writes through the DBAPI cursor of its transaction: the same row as SQLAlchemy's insert, committed
when ``add`` returns (another engine sees it), and a failed insert leaves nothing behind."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmpod.domain.audit import AuditRecord
from slurmpod.store import SqlStore


def _record(event_id: str = "0c0ffee0-0000-4000-8000-000000000001", **kw: object) -> AuditRecord:
    base = AuditRecord(
        event_id=event_id, event_time=1764633600.25, event_name="CreateCluster", event_source="sagemaker.amazonaws.com",
        account_id="123456789012", region="us-east-1", access_key_id="AKIAEXAMPLE", username="alice",
        read_only=False, resources=(("AWS::SageMaker::Cluster", "alpha"),), error_code=None, detail='{"a": 1}')
    return replace(base, **kw)  # type: ignore[arg-type]


def test_add_is_committed_and_complete(store: SqlStore, store_url: str) -> None:
    store.audit.add(_record())
    store.audit.add(_record("0c0ffee0-0000-4000-8000-000000000002", read_only=True, resources=(),
                            error_code="ValidationException", event_name="DescribeCluster"))
    other = SqlStore(store_url)  # a second engine: only committed rows are visible to it
    try:
        rows = list(other.audit.iter_all())
    finally:
        other.close()
    assert [replace(r, seq=0) for r in rows] == [
        _record(), _record("0c0ffee0-0000-4000-8000-000000000002", read_only=True, resources=(),
                           error_code="ValidationException", event_name="DescribeCluster")]
    assert rows[0].seq < rows[1].seq
    assert isinstance(rows[0].read_only, bool) and rows[1].read_only is True


def test_failed_add_writes_nothing_and_the_next_one_works(store: SqlStore) -> None:
    store.audit.add(_record())
    with pytest.raises(Exception):  # noqa: B017  (the driver's IntegrityError: event ids are unique)
        store.audit.add(_record(detail="again"))
    store.audit.add(_record("0c0ffee0-0000-4000-8000-000000000003"))
    assert [r.event_id[-1] for r in store.audit.iter_all()] == ["1", "3"]
    assert [r.detail for r in store.audit.iter_all()][0] == '{"a": 1}'
