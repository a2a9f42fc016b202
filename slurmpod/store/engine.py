"""The SQLAlchemy engine (SQLite in WAL mode with a busy timeout, or PostgreSQL by URL) and alembic migrations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event

_ALEMBIC_INI = Path(__file__).with_name("alembic.ini")


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_use_lifo=True,
                               pool_size=SQLITE_POOL_SIZE, max_overflow=SQLITE_MAX_OVERFLOW)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    engine = create_engine(url, pool_size=PG_POOL_SIZE, max_overflow=PG_MAX_OVERFLOW, pool_use_lifo=True)
    _ping_when_idle(engine)
    return engine


# Both pools hand out the connection returned last (``pool_use_lifo``), not the one idle longest: SQLite keeps a
# page cache per connection, dropped whenever another connection writes, and the round robin of a FIFO pool read
# through a cold cache almost every time (a request's CPU, in process: 7.4 -> 6.4 ms per create, describe, list
# and delete, median of 5 interleaved runs); psycopg prepares a statement on its fifth run on a connection.


def reads(engine: Engine) -> Engine:
    """The engine for reads: on PostgreSQL the same pool with its connections in autocommit, so a read is one
    round trip instead of three (psycopg sends ``BEGIN`` before the query and the pool a ``ROLLBACK`` when the
    connection is returned; a busy server's loop spent a third of its wall time in those). Same consistency: at
    PostgreSQL's READ COMMITTED every statement already took its own snapshot. SQLite reads are unchanged."""
    return engine.execution_options(isolation_level="AUTOCOMMIT") if engine.dialect.name == "postgresql" else engine


# A server's threads (8 boot workers, the loop, leases, health, the API's thread pool) share one pool: with the
# default 5 (+10 overflow) connections, checked-in overflow connections were closed and reopened (a backend
# started per connect) under 50 API clients.
PG_POOL_SIZE, PG_MAX_OVERFLOW = 16, 8
# On SQLite a connection is a file handle and a page cache, cheap to keep; a server answers reads on its event loop
# (``ApiContext.inline_reads``), which must never wait for a connection: room for every thread that may hold one at
# once (the API's 40 worker threads, 8 boot workers, the loop, leases, health, audit, the event loop itself).
SQLITE_POOL_SIZE, SQLITE_MAX_OVERFLOW = 8, 56
IDLE_PING_SECONDS = 5.0


def _ping_when_idle(engine: Engine) -> None:
    """``pool_pre_ping`` for connections idle longer than ``IDLE_PING_SECONDS`` only (a database restart or an
    idle timeout closes those): pinging at every checkout cost a round trip per transaction, ~9 % of a busy
    server's GIL time. A connection that fails its ping is replaced (the pool retries the checkout); a busy one
    broken by a database restart fails its statement once, and SQLAlchemy then invalidates the whole pool."""
    import time

    from sqlalchemy import exc

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < IDLE_PING_SECONDS:
            return
        try:
            with dbapi_conn.cursor() as cur:
                cur.execute("SELECT 1")
            dbapi_conn.rollback()
        except Exception as err:
            raise exc.DisconnectionError() from err


def migrate(engine: Engine) -> None:
    """Brings the schema to the newest alembic revision."""
    cfg = Config(str(_ALEMBIC_INI))
    cfg.set_main_option("script_location", str(_ALEMBIC_INI.parent / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
