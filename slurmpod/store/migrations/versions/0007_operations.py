"""cluster_operations (ListClusterOperations / DescribeClusterOperation) and client_tokens (ClientToken idempotency)

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_operations",
        sa.Column("operation_id", sa.String(64), primary_key=True),
        sa.Column("cluster_id", sa.String(12), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("creation_time", sa.Float, nullable=False),
        sa.Column("superseded", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("details", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_index("ix_cluster_operations_cluster_id", "cluster_operations", ["cluster_id", "creation_time"])
    op.create_table(
        "client_tokens",
        sa.Column("account_id", sa.String(12), primary_key=True),
        sa.Column("region", sa.String(32), primary_key=True),
        sa.Column("operation", sa.String(64), primary_key=True),
        sa.Column("token", sa.String(64), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(12), nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("client_tokens")
    op.drop_table("cluster_operations")
