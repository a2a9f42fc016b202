"""The typed contract between the reconciler and whatever makes instances.

A *provider* makes hosts: it launches an instance (an isolated host with its own address, hostname and
writable root volume over a read-only image), lists and terminates them, and hands out a
``CommandRunner`` that runs argv lists *inside* an instance as root. It knows nothing about clusters
specs, Slurm or the store: the reconciler builds ``InstanceRequest`` values and drives Slurm through the
runner (see ``slurmpod.slurm`` and ``slurmpod.lifecycle``).

Guarantees every implementation gives:

* ``launch`` is idempotent on ``instance_id``: launching an id that already exists returns it unchanged;
  nothing is ever launched twice. It returns only once the host is up and the runner works.
* ``terminate`` is idempotent; terminating an unknown id is not an error.
* Instances outlive the slurmpod process; a new provider object re-adopts them (``list_instances``).
* Failures are ``TemporaryProviderError`` (retry later, e.g. no capacity) or ``PermanentProviderError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class ProviderError(Exception):
    """Base of infrastructure errors; never shown to an API client directly."""


class TemporaryProviderError(ProviderError):
    """Worth retrying later (``delay`` seconds is a hint)."""

    def __init__(self, message: str, delay: float = 5.0) -> None:
        super().__init__(message)
        self.delay = delay


class InsufficientCapacity(TemporaryProviderError):
    """No capacity for the instance type right now (AWS's wording in ``capacity_message``)."""

    def __init__(self, instance_type: str) -> None:
        super().__init__(capacity_message(instance_type))
        self.instance_type = instance_type


class PermanentProviderError(ProviderError):
    """Retrying the same request will not help."""


class SetupError(PermanentProviderError):
    """The machine cannot run this provider (not root, packages missing ...): a one-line, actionable message."""


def capacity_message(instance_type: str) -> str:
    return (
        f"We currently do not have sufficient capacity to launch new {instance_type} instances. "
        "Please try again."
    )


@dataclass(frozen=True)
class VolumeMount:
    """A per-cluster directory owned by the provider, mounted into the instance at ``path``.

    ``name`` identifies the volume within the cluster (e.g. ``slurm-state``); it outlives instances and
    is removed by ``teardown_cluster``. ``seed``: a directory of the instance's image; a volume that does not
    exist yet starts as a copy of it, with ``SEEDED_MARKER`` in it (made before the instance boots; a provider
    that cannot leaves the volume empty and the marker absent, and the instance seeds it itself).
    """

    name: str
    path: str
    seed: str | None = None


#: the file a provider puts in a volume it made as a copy of ``VolumeMount.seed``, once the copy is whole
SEEDED_MARKER = ".slurmpod-seeded"


@dataclass(frozen=True)
class NodeFile:
    """A file (or, with ``link``, a symlink to ``link``) to place on a new root volume before the host boots, like
    cloud-init's ``write_files``: ``owner`` is ``user`` or ``user:group`` of the *image*, parents are created."""

    path: str
    content: bytes = b""
    mode: int = 0o644
    owner: str = "root"
    link: str | None = None

    def __repr__(self) -> str:  # contents may be secrets (munge key, database password): never in a log line
        return (f"NodeFile({self.path!r}, {len(self.content)} bytes, {self.mode:04o}, {self.owner!r}, "
                f"link={self.link!r})")


@dataclass(frozen=True)
class InstanceRequest:
    cluster_id: str
    instance_id: str
    group: str
    instance_type: str
    image_id: str
    image_root: str  # host path of the image's read-only root filesystem ("/" for the built-in image)
    volumes: tuple[VolumeMount, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: the address to give the instance if the provider can (a replaced controller keeps its address); a hint:
    #: a provider that cannot honour it allocates as usual
    address: str | None = None
    #: instance metadata the provider cannot know, served by its IMDS where it has one (local provider):
    #: ``region`` (default us-east-1), ``availability-zone`` (default <region>a), ``account-id``,
    #: ``http-tokens`` (``optional`` = IMDSv1 and v2, the default; ``required`` = IMDSv2 only)
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: accelerator device files the instance's type has (``/dev/nvidia0`` ... ``/dev/nvidia7``): the local provider
    #: emulates them (character devices in the node's own /dev); the ssh provider refuses a host whose number of
    #: such devices differs
    devices: tuple[str, ...] = ()
    #: files for a new root volume (launch, replace_root_volume), written before the host's init starts, so units
    #: enabled in the image find their keys and settings at first boot; a hint like ``address``: a provider that
    #: cannot place them (ssh: the host booted long ago) ignores them, and the caller writes what it needs after
    #: the host is up anyway. Never stored in the provider's records (they may hold secrets).
    files: tuple[NodeFile, ...] = field(default=(), hash=False, repr=False)


@dataclass(frozen=True)
class ProviderInstance:
    cluster_id: str
    instance_id: str
    group: str
    ip: str
    hostname: str
    alive: bool  # False: known to the provider but its processes are gone (crashed, killed)


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


class CommandRunner(Protocol):
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Runs ``argv`` inside the instance as root and waits for it.

        Raises ``TemporaryProviderError`` on timeout or when the instance is unreachable.
        A non-zero exit is *not* an error: it is in ``returncode``.
        """
        ...

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        """The host argv that runs ``argv`` inside the instance attached to the caller's terminal."""
        ...


@runtime_checkable
class InitAware(Protocol):
    """A runner that knows, without running anything in the instance, whether systemd is its PID 1."""

    def runs_systemd(self) -> bool | None:
        """True or False when known (the provider booted the instance), None when only the instance can tell."""
        ...


@runtime_checkable
class SeedWarming(Protocol):
    """A provider that can make seeded volumes (``VolumeMount.seed``) ahead of the launches that will ask for them."""

    def warm_seed(self, image_root: str, seed: str) -> None:
        """A hint, returns at once: volumes seeded from ``seed`` of the image at ``image_root`` will be asked for."""
        ...


class Provider(Protocol):
    name: str

    def set_capacity(self, table: Mapping[str, int]) -> None:
        """Replaces the capacity table (instance type -> max live instances; unlisted types unlimited)."""
        ...

    def prepare_cluster(self, cluster_id: str) -> None:
        """Creates per-cluster resources (network, volume directories). Idempotent."""
        ...

    def launch(self, request: InstanceRequest) -> ProviderInstance:
        """Launches (or finds) the instance; returns when it is up. Idempotent on instance_id."""
        ...

    def terminate(self, cluster_id: str, instance_id: str) -> None:
        """Removes the instance's processes, namespaces, mounts, address and root volume. Idempotent."""
        ...

    def cancel_commands(self, cluster_id: str, instance_id: str) -> int:
        """The instance is being removed: ends the commands its runners run now (a lifecycle script may run for
        its whole timeout) and makes later ones raise ``TemporaryProviderError`` at once, until ``terminate``.
        Never blocks; returns how many commands were running."""
        ...

    def reboot(self, cluster_id: str, instance_id: str) -> ProviderInstance:
        """Stops every process of the instance and starts it again: same id, address, root volume."""
        ...

    def replace_root_volume(self, request: InstanceRequest) -> ProviderInstance:
        """Stops the instance, replaces its root volume with a fresh one over ``request.image_root``,
        starts it again with the same id, hostname and address."""
        ...

    def list_instances(self, cluster_id: str) -> list[ProviderInstance]:
        """Every instance of the cluster the provider knows, alive or not."""
        ...

    def runner(self, cluster_id: str, instance_id: str) -> CommandRunner:
        ...

    def teardown_cluster(self, cluster_id: str) -> None:
        """Terminates every instance of the cluster and removes its network and volumes. Idempotent."""
        ...
