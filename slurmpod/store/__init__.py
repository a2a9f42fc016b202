"""Persistence: SQLAlchemy Core over SQLite (default) or PostgreSQL, alembic migrations, versioned writes."""

from slurmpod.store.sql import SqlStore, migrate

__all__ = ["SqlStore", "migrate"]
