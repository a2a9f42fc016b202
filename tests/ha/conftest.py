"""The PostgreSQL fixtures of the store tests (a private server for the session; a fresh database per test), and
the local provider's state dir of the integration tests."""

from tests.integration.conftest import local_state
from tests.store.conftest import fresh_pg_url, pg_server, pg_url

__all__ = ["fresh_pg_url", "local_state", "pg_server", "pg_url"]
