"""initial schema: clusters, nodes, events, settings, leases

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("cluster_id", sa.String(12), primary_key=True),
        sa.Column("account_id", sa.String(12), nullable=False),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("arn", sa.String(256), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("last_good_spec", sa.Text),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("failure_message", sa.Text),
        sa.Column("operation_id", sa.String(64)),
        sa.Column("applied_topology", sa.String(128)),
        sa.Column("lifecycle_snapshots", sa.Text, nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("creation_time", sa.Float, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.UniqueConstraint("account_id", "name", name="uq_clusters_account_name"),
    )
    op.create_table(
        "nodes",
        sa.Column("instance_id", sa.String(32), primary_key=True),
        sa.Column("cluster_id", sa.String(12), nullable=False),
        sa.Column("group_name", sa.String(63), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("message", sa.Text),
        sa.Column("launch_time", sa.Float, nullable=False),
        sa.Column("ip", sa.String(64)),
        sa.Column("hostname", sa.String(128)),
        sa.Column("logical_id", sa.String(128)),
        sa.Column("image_id", sa.String(32)),
        sa.Column("image_release", sa.String(32)),
        sa.Column("lifecycle_digest", sa.String(80)),
        sa.Column("last_software_update_time", sa.Float),
        sa.Column("phases", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt", sa.Float, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_index("ix_nodes_cluster_id", "nodes", ["cluster_id"])
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(36), nullable=False, unique=True),
        sa.Column("cluster_id", sa.String(12), nullable=False),
        sa.Column("cluster_name", sa.String(63), nullable=False),
        sa.Column("cluster_arn", sa.String(256), nullable=False),
        sa.Column("resource_type", sa.String(32), nullable=False),
        sa.Column("level", sa.String(8), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("event_time", sa.Float, nullable=False),
        sa.Column("group_name", sa.String(63)),
        sa.Column("instance_id", sa.String(32)),
        sa.Column("operation_id", sa.String(64)),
        sa.Column("details", sa.Text, nullable=False),
    )
    op.create_index("ix_events_cluster_id", "events", ["cluster_id"])
    op.create_index("ix_events_event_time", "events", ["event_time"])
    op.create_table(
        "settings_kv",
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "leases",
        sa.Column("cluster_id", sa.String(12), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("expires", sa.Float, nullable=False),
        sa.Column("released", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    for name in ("leases", "settings_kv", "events", "nodes", "clusters"):
        op.drop_table(name)
