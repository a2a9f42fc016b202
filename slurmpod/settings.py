"""Server settings: one frozen dataclass built by the CLI (no globals read at import time)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def default_state_dir() -> Path:
    return Path(os.environ.get("SLURMPOD_STATE_DIR", "/var/lib/slurmpod"))


@dataclass(frozen=True)
class Settings:
    state_dir: Path = field(default_factory=default_state_dir)
    db_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    provider: str = "local"
    compat: str = "extended"  # extended | strict
    region: str = "us-east-1"
    account_id: str = "123456789012"  # the default account of new credentials (and of --auth none)
    auth: str = "sigv4"  # sigv4 | none (loopback only)
    audit_retention_days: float = 90.0  # the audit trail keeps this long (CloudTrail's event history: 90 days)
    # simulated provider
    simulated_capacity: dict[str, int] = field(default_factory=dict)
    simulated_launch_delay: float = 0.05
    simulated_terminate_delay: float = 0.01
    simulated_seed: int = 0
    simulated_fail_rate: float = 0.0
    # local provider
    local_cidr: str = "10.231.0.0/16"
    accounting: str = "local"  # local (slurmdbd + MariaDB per cluster, on its own service host) | none
    # the image of nodes whose group names no ImageId: "default" (the image store's default root filesystem), a
    # Debian suite ("bookworm", "trixie", "sid": the store's default image of that suite), "builtin" (this host's own
    # / as the lower layer: the legacy model, nodes can read the host) or an ami-id; $SLURMPOD_NODE_IMAGE sets the
    # default
    node_image: str = field(default_factory=lambda: os.environ.get("SLURMPOD_NODE_IMAGE") or "default")
    # reconciler
    reconcile_interval: float = 2.0
    max_parallel_launches: int = 8
    min_count_timeout: float = 3 * 3600.0  # HyperPod's MinCount deadline
    retry_delay: float = 2.0  # first backoff step for Continuous launch retries
    update_drain_timeout: float = 3600.0  # software updates wait this long for a node's jobs to end
    dhc_busy_timeout: float = 600.0  # on-demand deep health checks skip nodes busy longer than this
    dhc_stress_seconds: float = 5.0  # InstanceStress: stress-ng seconds per node
    capacity: dict[str, int] = field(default_factory=dict)  # initial capacity table (both providers)
    # several servers on one PostgreSQL database (leases; SQLite: one server owns everything)
    replica_id: str | None = None  # None: <machine>-<pid>-<random>
    machine_id: str | None = None  # None: /etc/machine-id, else the host name
    lease_seconds: float = 15.0
    # where the reconciler runs: "thread" (in the API's process) or "process" (a child process; shared database)
    reconciler: str = "thread"
    reconciler_nice: int = 0  # the child's niceness increment (process)
    # lifecycle sources
    s3_endpoint_url: str | None = None
    # file:// lifecycle sources must lie under one of these directories (empty: anywhere but the state dir)
    lifecycle_file_roots: tuple[str, ...] = ()

    @property
    def shared_database(self) -> bool:
        """Several servers may share the database (PostgreSQL): clusters are owned through leases."""
        return not self.database_url.startswith("sqlite")

    @property
    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.state_dir / 'slurmpod.db'}"
