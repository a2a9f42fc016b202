"""The PostgreSQL fixtures of the store tests (a private server for the session; a fresh database per test)."""

from tests.store.conftest import fresh_pg_url, pg_server, pg_url

__all__ = ["fresh_pg_url", "pg_server", "pg_url"]
