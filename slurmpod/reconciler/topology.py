"""What of a cluster spec shapes slurm.conf, and its digest (pure)."""

from __future__ import annotations

import hashlib
import json

from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.validation import effective_strategy


def topology_key(spec: ClusterSpec) -> str:
    """Digest of the groups, node types and partitions: changes iff slurm.conf's topology must change.
    Controller addresses are not part of it (they are fixed for a controller's life); the SlurmConfigStrategy is
    (switching it re-renders slurm.conf under the new rules)."""
    topo = sorted(
        (g.name, g.node_type.value if g.node_type else "", g.partition or "")
        for g in spec.instance_groups
        if g.node_type is None or g.node_type.value != "Login"
    )
    strategy = effective_strategy(spec)
    key: dict[str, object] = {"groups": topo, "strategy": strategy.value if strategy else "Merge"}
    adb = spec.accounting_database
    if adb is not None:  # attaching or changing it reconfigures slurmdbd (and restarts the controllers)
        key["accounting"] = [adb.endpoint, adb.effective_port, adb.name or "", adb.secret_arn]
    return "topo-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
