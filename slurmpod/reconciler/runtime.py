"""What the reconciler needs from the world below it: a ``ClusterRuntime`` turns records into hosts and
Slurm membership. ``SlurmRuntime`` (real daemons over a Provider) and ``SimulatedRuntime`` implement it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import DeepHealthCheck
from slurmpod.lifecycle.images import Image
from slurmpod.reconciler.health import SlurmRequest


class NodeBootError(Exception):
    """A node cannot be brought up (launch refused, script failed, daemon did not start).

    ``retryable`` errors (no capacity) may be retried later; the message is user-facing.
    """

    def __init__(self, message: str, *, retryable: bool = False, delay: float = 5.0) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.delay = delay


class TopologyDriftError(Exception):
    """Managed strategy: the live slurm.conf differs from what slurmpod last wrote (``drift`` says how)."""

    def __init__(self, drift: list[str]) -> None:
        super().__init__("; ".join(drift))
        self.drift = drift


@dataclass(frozen=True)
class DeepHealthResult:
    """One node's outcome of a deep health check run: ``detail`` says why it failed; ``log`` is its output."""

    ok: bool
    detail: str
    log: str = ""


class ClusterRuntime(Protocol):
    """Guarantees: every method is idempotent and safe to call again after a crash at any point; a method
    that talks to nodes bounds every command by a timeout; failures a user should see are ``NodeBootError``
    (boot, update, node operations) or ``TopologyDriftError``. Observation methods (``alive``, ``unreachable``,
    ``slurm_requests``, ``running_jobs``) never raise for an unreachable node: they report what they can."""

    name: str
    #: False: boot phases after the launch are cheap and idempotent (their checkpoints may be coalesced)
    checkpoint_every_phase: bool

    def set_image_lookup(self, lookup: Callable[[str | None], Image]) -> None:
        """Where the runtime finds an image's root filesystem by id (None = the latest)."""
        ...

    def batch(self) -> AbstractContextManager[None]:
        """Around the boot steps or removals of a batch of nodes (``workers.batch``): what they launch or terminate
        is durable at the provider when the block ends, not necessarily after each call."""
        ...

    def set_capacity(self, table: Mapping[str, int]) -> None:
        """Passes the capacity table (changeable while the server runs) to the provider."""
        ...

    def desired_topology(self, cluster: ClusterRecord) -> str:
        """Digest of the Slurm topology the cluster's current spec needs (pure, cheap)."""
        ...

    def boot_step(
        self, cluster: ClusterRecord, node: NodeRecord, phase: str, nodes: Sequence[NodeRecord]
    ) -> Mapping[str, Any]:
        """Performs one boot phase of ``node`` (idempotent); returns node fields to record
        (``ip``, ``hostname``, ``lifecycle_digest`` ...) and optionally ``applied_topology``.

        Raises NodeBootError.
        """
        ...

    def apply_topology(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
        """Rewrites slurm.conf on the controllers and restarts them gracefully; returns the digest."""
        ...

    def remove_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        """Takes the node out of Slurm (if it joined) and terminates its instance. Idempotent."""
        ...

    def drain(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], reason: str) -> bool:
        """Drains the node in Slurm; True when slurmpod drained it (False: not a Slurm node, or drained already
        by someone else -- then slurmpod must not undrain it later)."""
        ...

    def jobs_done(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> bool:
        """Whether the node runs no job (a drained node is ready for maintenance)."""
        ...

    def running_jobs(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> list[str]:
        """Ids of the Slurm jobs with a part on the node (empty for non-compute nodes)."""
        ...

    def resume(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        """Undrains a node slurmpod drained."""
        ...

    def replace_root(
        self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], image_id: str
    ) -> None:
        """Stops the node's daemons gracefully and replaces its root volume with a fresh one of ``image_id``
        (same instance id, hostname and address). The caller reruns the boot phases from ``baseline``."""
        ...

    def reboot_node(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
        """Stops the node's daemons gracefully, then every process, and starts it again (same root volume).
        The caller reruns the boot phases that start daemons."""
        ...

    def slurm_requests(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> Mapping[str, SlurmRequest]:
        """Nodes asked, the Slurm way, to be replaced or rebooted once idle (``scontrol update node=X state=fail
        reason="Action:Replace"``, by an operator or a node's health agent): instance id -> the request."""
        ...

    def unreachable(self, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> set[str]:
        """Running nodes whose Slurm daemon is gone although the instance lives (instance ids)."""
        ...

    def teardown_cluster(self, cluster: ClusterRecord) -> None:
        """Removes every per-cluster resource. Idempotent."""
        ...

    def alive(self, cluster: ClusterRecord) -> Mapping[str, bool]:
        """instance_id -> whether its instance still runs (instances the runtime knows)."""
        ...

    def service_instances(self, cluster: ClusterRecord) -> set[str]:
        """Provider instances of the cluster that are cluster services (the accounting host), not nodes."""
        ...

    def terminate_instance(self, cluster: ClusterRecord, instance_id: str) -> None:
        """Terminates one provider instance no record owns (a leak). Idempotent."""
        ...

    def interrupt(self, cluster: ClusterRecord, node: NodeRecord) -> None:
        """The node is to be removed while work runs on it (a boot in its lifecycle script): ends the commands it
        runs and refuses later ones, so that work stops now rather than at its timeout. Never blocks."""
        ...

    def heal_services(self, cluster: ClusterRecord) -> list[tuple[bool, str]]:
        """Restores cluster-level services (the accounting host) found dead: ``(restored, description)`` each."""
        ...

    def dhc_isolate(self, cluster: ClusterRecord, targets: Sequence[NodeRecord], nodes: Sequence[NodeRecord]) -> None:
        """Puts compute nodes in the deep-health-check reservation and partition with the in-progress feature (no new
        job of anyone else lands on them; running jobs go on). Idempotent."""
        ...

    def dhc_run(self, cluster: ClusterRecord, targets: Sequence[NodeRecord], checks: Sequence[DeepHealthCheck],
                nodes: Sequence[NodeRecord], stress_seconds: float) -> Mapping[str, DeepHealthResult]:
        """Runs ``checks`` on isolated nodes (as Slurm job steps in the reservation); instance id -> result (a node
        without an answer failed). Never raises for a node that cannot be reached: that node failed."""
        ...

    def dhc_release(self, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord], *,
                    passed: bool) -> None:
        """Takes the node out of the reservation and partition and clears the feature; a node that failed is drained
        first (it takes no job before it is replaced). Idempotent."""
        ...
