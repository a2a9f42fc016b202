"""audit_events: the audit trail of API calls and console actions (served as CloudTrail's LookupEvents)

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(36), nullable=False, unique=True),
        sa.Column("event_time", sa.Float, nullable=False),
        sa.Column("account_id", sa.String(12), nullable=False),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("event_name", sa.String(128), nullable=False),
        sa.Column("event_source", sa.String(64), nullable=False),
        sa.Column("access_key_id", sa.String(128), nullable=False),
        sa.Column("username", sa.String(128), nullable=False),
        sa.Column("read_only", sa.Boolean, nullable=False),
        sa.Column("resources", sa.Text, nullable=False),
        sa.Column("resource_keys", sa.Text, nullable=False),
        sa.Column("error_code", sa.String(128)),
        sa.Column("detail", sa.Text, nullable=False),
    )
    op.create_index("ix_audit_events_event_time", "audit_events", ["event_time"])
    op.create_index("ix_audit_events_account_time", "audit_events", ["account_id", "region", "event_time"])


def downgrade() -> None:
    op.drop_table("audit_events")
