"""software_update: the running UpdateClusterSoftware operation and per-group outcomes

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("software_update", sa.Text))
        batch.add_column(sa.Column("software_update_status", sa.Text, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_column("software_update_status")
        batch.drop_column("software_update")
