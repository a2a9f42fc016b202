"""Alembic environment: the store passes its own connection in ``config.attributes['connection']``."""

from __future__ import annotations

from alembic import context

from slurmpod.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only via slurmpod.store.engine.migrate
    raise RuntimeError("run migrations through slurmpod.store.engine.migrate()")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
