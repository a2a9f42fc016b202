"""nodes: indexes for ListClusterNodes' two sort orders (keyset pages read from the index; issue 21)

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_nodes_cluster_launch", "nodes", ["cluster_id", "launch_time", "seq", "instance_id"])
    op.create_index("ix_nodes_cluster_group", "nodes", ["cluster_id", "group_name", "instance_id"])


def downgrade() -> None:
    op.drop_index("ix_nodes_cluster_group", table_name="nodes")
    op.drop_index("ix_nodes_cluster_launch", table_name="nodes")
