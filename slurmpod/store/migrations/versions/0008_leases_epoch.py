"""leases: fencing epoch and home machine; replicas: the servers sharing this database (issue 18)

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("machine", sa.String(128)))
    op.create_table(
        "replicas",
        sa.Column("replica_id", sa.String(128), primary_key=True),
        sa.Column("machine", sa.String(128), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("replicas")
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("machine")
        batch.drop_column("epoch")
