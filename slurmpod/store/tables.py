"""SQLAlchemy Core tables. Schema changes go through alembic (``store/migrations``), never create_all."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

clusters = Table(
    "clusters",
    metadata,
    Column("cluster_id", String(12), primary_key=True),
    Column("account_id", String(12), nullable=False),
    Column("region", String(32), nullable=False),
    Column("name", String(63), nullable=False),
    Column("arn", String(256), nullable=False),
    Column("spec", Text, nullable=False),
    Column("last_good_spec", Text),
    Column("status", String(32), nullable=False),
    Column("failure_message", Text),
    Column("operation_id", String(64)),
    Column("applied_topology", String(128)),
    Column("lifecycle_snapshots", Text, nullable=False, default="{}"),
    Column("group_states", Text, nullable=False, default="{}"),
    Column("software_update", Text),
    Column("software_update_status", Text, nullable=False, default="{}"),
    Column("schedules", Text, nullable=False, default="{}"),
    Column("provider", String(32), nullable=False),
    Column("creation_time", Float, nullable=False),
    Column("generation", Integer, nullable=False),
    Column("version", Integer, nullable=False),
    UniqueConstraint("account_id", "region", "name", name="uq_clusters_account_region_name"),
)

nodes = Table(
    "nodes",
    metadata,
    Column("instance_id", String(32), primary_key=True),
    Column("cluster_id", String(12), nullable=False, index=True),
    Column("group_name", String(63), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("status", String(32), nullable=False),
    Column("message", Text),
    Column("launch_time", Float, nullable=False),
    Column("ip", String(64)),
    Column("hostname", String(128)),
    Column("logical_id", String(128)),
    Column("image_id", String(32)),
    Column("image_release", String(32)),
    Column("lifecycle_digest", String(80)),
    Column("last_software_update_time", Float),
    Column("phases", Text, nullable=False, default=""),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt", Float, nullable=False, default=0.0),
    Column("data", Text, nullable=False, default="{}"),
    Column("version", Integer, nullable=False),
    # the two ListClusterNodes sort orders (keyset pages in SQL, store.sql.page_nodes): a page reads its 100 rows
    # from the index instead of sorting the cluster's nodes (migration 0009)
    Index("ix_nodes_cluster_launch", "cluster_id", "launch_time", "seq", "instance_id"),
    Index("ix_nodes_cluster_group", "cluster_id", "group_name", "instance_id"),
)

events = Table(
    "events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("cluster_id", String(12), nullable=False, index=True),
    Column("cluster_name", String(63), nullable=False),
    Column("cluster_arn", String(256), nullable=False),
    Column("resource_type", String(32), nullable=False),
    Column("level", String(8), nullable=False),
    Column("description", Text, nullable=False),
    Column("event_time", Float, nullable=False, index=True),
    Column("group_name", String(63)),
    Column("instance_id", String(32)),
    Column("operation_id", String(64)),
    Column("details", Text, nullable=False, default="{}"),
)

settings_kv = Table(
    "settings_kv",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("cluster_id", String(12), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("expires", Float, nullable=False),
    Column("released", Boolean, nullable=False, default=False),
    Column("epoch", Integer, nullable=False, default=0),  # +1 on every change of owner: the fencing token
    Column("machine", String(128)),  # where the cluster's nodes live (None: reachable from any machine)
)

# the servers sharing this database (``store.leases``): heartbeats, for the spread of clusters over them
replicas = Table(
    "replicas",
    metadata,
    Column("replica_id", String(128), primary_key=True),
    Column("machine", String(128), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("expires", Float, nullable=False),
)

# the audit trail (CloudTrail's event history): one row per API call or console action
audit_events = Table(
    "audit_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("event_time", Float, nullable=False, index=True),
    Column("account_id", String(12), nullable=False),
    Column("region", String(32), nullable=False),
    Column("event_name", String(128), nullable=False),
    Column("event_source", String(64), nullable=False),
    Column("access_key_id", String(128), nullable=False),
    Column("username", String(128), nullable=False),
    Column("read_only", Boolean, nullable=False),
    Column("resources", Text, nullable=False),  # JSON [[type, name], ...]
    Column("resource_keys", Text, nullable=False),  # "|name|...|" and "|type:T|" for LIKE filters
    Column("error_code", String(128)),
    Column("detail", Text, nullable=False),
    Index("ix_audit_events_account_time", "account_id", "region", "event_time"),
)

# cluster operations (ListClusterOperations / DescribeClusterOperation): one row per operation id a cluster had
cluster_operations = Table(
    "cluster_operations",
    metadata,
    Column("operation_id", String(64), primary_key=True),
    Column("cluster_id", String(12), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("creation_time", Float, nullable=False),
    Column("superseded", Boolean, nullable=False, default=False),
    Column("details", Text, nullable=False, default="{}"),
    Index("ix_cluster_operations_cluster_id", "cluster_id", "creation_time"),
)

# idempotency tokens (ClientToken) of accepted requests, with what they answered
client_tokens = Table(
    "client_tokens",
    metadata,
    Column("account_id", String(12), primary_key=True),
    Column("region", String(32), primary_key=True),
    Column("operation", String(64), primary_key=True),
    Column("token", String(64), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("cluster_id", String(12), nullable=False),
    Column("result", Text, nullable=False),
    Column("created", Float, nullable=False),
)
