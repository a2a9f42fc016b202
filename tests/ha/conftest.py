"""The PostgreSQL fixtures of the store tests (a private server for the session; a fresh database per test), the
local provider's state dir of the integration tests, and servers started for one test."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from tests.integration.conftest import local_state
from tests.serverproc import ServerProcess
from tests.store.conftest import fresh_pg_url, pg_server, pg_url

__all__ = ["fresh_pg_url", "local_state", "pg_server", "pg_url", "running"]

S = TypeVar("S", bound=ServerProcess)


@contextmanager
def running(servers: Sequence[S]) -> Iterator[list[S]]:
    """``servers`` started in order, every one stopped afterwards (also when a start or the test fails)."""
    try:
        for s in servers:
            s.start()
        yield list(servers)
    finally:
        for s in servers:
            s.stop()
