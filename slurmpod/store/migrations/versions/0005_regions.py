"""regions: cluster names are unique per account AND region (clusters.region existed since 0001; every row keeps
the region it was created in, which was the server's --region, us-east-1 by default)

Revision ID: 0005
Revises: 0004
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_constraint("uq_clusters_account_name", type_="unique")
        batch.create_unique_constraint("uq_clusters_account_region_name", ["account_id", "region", "name"])


def downgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_constraint("uq_clusters_account_region_name", type_="unique")
        batch.create_unique_constraint("uq_clusters_account_name", ["account_id", "name"])
