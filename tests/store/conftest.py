"""Store fixtures: one throwaway PostgreSQL server per session (``pg_server``/``pg_url``) and a fresh
database per test for the parametrized store suite.

Without PostgreSQL binaries the PostgreSQL cases skip, unless ``SLURMPOD_REQUIRE_POSTGRES=1`` (set it in CI),
which turns the skip into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpod.store.sql import SqlStore
from tests.pg import PgServer, postgres_server, unavailable_reason


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A private PostgreSQL server on 127.0.0.1 for the whole session (stopped and deleted afterwards)."""
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("SLURMPOD_REQUIRE_POSTGRES"):
            pytest.fail(f"SLURMPOD_REQUIRE_POSTGRES is set but PostgreSQL is unusable: {reason}")
        pytest.skip(f"PostgreSQL unavailable: {reason}")
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def pg_url(pg_server: PgServer) -> str:
    """SQLAlchemy URL (``postgresql+psycopg://postgres@127.0.0.1:<port>/slurmpod_test``) of the session DB."""
    return pg_server.url()


@pytest.fixture
def fresh_pg_url(pg_server: PgServer) -> Iterator[str]:
    """URL of an empty database created for this test and dropped (forcefully) after it."""
    name = "t_" + uuid.uuid4().hex[:16]
    url = pg_server.create_database(name)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a temp SQLite file, or a freshly created PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'store.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[SqlStore]:
    s = SqlStore(store_url)
    try:
        yield s
    finally:
        s.close()
