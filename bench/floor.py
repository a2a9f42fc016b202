"""The floor: the seed topology's daemons started by a plain script, without slurmpod's control plane.

Uses the same building blocks slurmpod uses underneath (``LocalProvider`` for the namespaces and the
overlay roots, ``render_slurm_conf`` and ``slurmpod.slurm.control``'s start functions), but no API,
store, reconciler or boot phases: launch the 3 nodes (in parallel), munged on each, slurmctld, the
2 dynamic slurmds (in parallel), wait until both are idle, then run the first-job probe.

The nodes boot from the same image as ``slurmpod server``'s by default: the image store's default root
filesystem (``floor_image("default")``; systemd is PID 1 in every node and ``control``'s start functions
start munge/slurmctld/slurmd as the image's systemd units). ``floor_image("builtin")`` is the legacy
host-root image (no systemd; the daemons are started as plain processes). With ``accounting`` the floor
also brings up the cluster's accounting host (slurmdbd + MariaDB) with slurmpod's own ``AccountingService``,
in parallel with the nodes, and starts slurmctld once slurmdbd answers, as slurmpod's default does.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.jobs import JOB_TIMEOUT, PROBE_ARGV, ProbeResult, parse_probe
from slurmpod import ids
from slurmpod.domain.catalog import instance_type_info, slurm_resources
from slurmpod.lifecycle.images import BUILTIN, Image
from slurmpod.lifecycle.imagestore import PRIMARY_SUITE, ImageStore
from slurmpod.lifecycle.nodelayer import RECIPE_VERSION
from slurmpod.providers.base import InstanceRequest, ProviderInstance, VolumeMount
from slurmpod.providers.local.provider import LocalProvider
from slurmpod.reconciler.accounting import AccountingService
from slurmpod.slurm import admin, control
from slurmpod.slurm.conf import SlurmTopology, render_cgroup_conf, render_slurm_conf

INSTANCE_TYPE = "ml.t3.medium"
COMPUTE_GROUP = "compute-group"
PARTITION = "compute"
JOIN_TIMEOUT = 60.0
MAX_PARALLEL = 8  # launches / slurmd starts at once: slurmpod server's default max_parallel_launches
# the same volumes SlurmRuntime gives its nodes (slurm_runtime.STATE_VOLUME / HOME_VOLUME)
STATE_VOLUME = VolumeMount("slurm-state", "/var/lib/slurm/slurmctld")
HOME_VOLUME = VolumeMount("home", "/home")
SUITE = PRIMARY_SUITE  # the default image's suite
IMAGE_CHOICES = ("default", "builtin")  # or an ami-id of the image store


class FloorError(RuntimeError):
    """A floor run did not reach its goal."""


@dataclass
class FloorRun:
    """Seconds from t0 (nothing exists) for one floor run."""

    all_idle: float = 0.0
    job_done: float = 0.0
    sbatch_to_completed: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds since t0 when it ended


def floor_image(choice: str = "default", store: ImageStore | None = None) -> Image:
    """The image the floor's nodes boot: ``default`` is the image store's default root filesystem (what
    ``slurmpod server`` boots unless ``--node-image builtin``), a Debian suite (``trixie``) that suite's default
    image, ``builtin`` the legacy host-root image, else an ami-id of the image store. A missing image is a
    ``FloorError`` saying how to build one."""
    if choice == "builtin":
        return BUILTIN
    store = store or ImageStore()
    suite = SUITE if choice == "default" else None if choice.startswith("ami-") else choice
    m = store.default(RECIPE_VERSION, suite) if suite else store.get(choice)
    if m is None and suite:
        raise FloorError(f"floor: the image store {store.root} has no default {suite} image for node-layer recipe "
                         f"{RECIPE_VERSION}; build it with `slurmpod images build --default --suite {suite}` "
                         "(scripts/install.sh does), or benchmark the legacy host-root nodes (--node-image builtin)")
    if m is None:
        raise FloorError(f"floor: image {choice} is not in the image store {store.root}; name one that is, "
                         "'default' (the store's default image) or 'builtin' (the legacy host-root image)")
    return Image.from_manifest(m, store.rootfs(m.id))


def _request(cluster_id: str, group: str, volumes: tuple[VolumeMount, ...], image: Image) -> InstanceRequest:
    return InstanceRequest(
        cluster_id=cluster_id, instance_id=ids.new_instance_id(), group=group, instance_type=INSTANCE_TYPE,
        image_id=image.image_id, image_root=image.root, volumes=volumes,
        labels={"slurmpod/cluster": "bench-floor", "slurmpod/group": group},
    )


def _wait_all_idle(ctl: admin.SlurmControl, names: list[str], timeout: float = JOIN_TIMEOUT) -> None:
    """Polls ``sinfo --json`` in the controller until every node is joined and IDLE."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            seen = {n.name: n for n in ctl.nodes()}
        except control.SlurmError:
            seen = {}
        if all(n in seen and seen[n].is_joined() and seen[n].is_idle() for n in names):
            return
        if time.monotonic() >= deadline:
            states = {n: sorted(seen[n].states) if n in seen else None for n in names}
            raise FloorError(f"compute nodes not idle within {timeout:.0f}s: {states}")
        time.sleep(control.POLL_INTERVAL)


def run_floor(state_dir: Path, compute_count: int = 2, *, on_idle: Callable[[], None] | None = None,
              probe: bool = True, image: Image | None = None, accounting: bool = False) -> FloorRun:
    """One floor run in ``state_dir`` (created if needed); tears its cluster down before returning.
    ``on_idle`` is called once every node is idle (memory is measured there); ``probe`` runs the first job;
    ``image`` defaults to ``floor_image("default")``; ``accounting`` adds the accounting host (slurmdbd)."""
    image = image or floor_image()
    provider = LocalProvider(state_dir)
    service = AccountingService(provider, state_dir, image=image) if accounting else None
    cluster_id = ids.new_cluster_id()
    key = secrets.token_bytes(1024)
    result = FloorRun()
    try:
        t0 = time.monotonic()

        def mark(phase: str) -> None:
            result.phases[phase] = time.monotonic() - t0

        provider.prepare_cluster(cluster_id)
        if service is not None:  # boots in parallel with the nodes, as slurmpod's does
            service.begin(cluster_id, "floor", key)
        requests = [_request(cluster_id, "controller-group", (STATE_VOLUME, HOME_VOLUME), image)]
        requests += [_request(cluster_id, COMPUTE_GROUP, (HOME_VOLUME,), image) for _ in range(compute_count)]

        def launch_and_munge(req: InstanceRequest) -> ProviderInstance:
            inst = provider.launch(req)
            control.start_munge(provider.runner(cluster_id, req.instance_id), key)
            return inst

        with ThreadPoolExecutor(max_workers=min(len(requests), MAX_PARALLEL)) as pool:
            instances = list(pool.map(launch_and_munge, requests))
        mark("launched+munged")
        ctl, computes = instances[0], instances[1:]
        ctl_runner = provider.runner(cluster_id, ctl.instance_id)
        acct = None
        if service is not None:  # slurmctld's first start needs slurmdbd up (Slurm 22.05)
            acct = service.ensure(cluster_id, "floor", key)
            mark("accounting")
        topology = SlurmTopology(
            cluster_name="floor", controllers=((ctl.hostname, ctl.ip),),
            compute_groups=((COMPUTE_GROUP, PARTITION),), accounting=acct,
        )
        control.start_slurmctld(ctl_runner, render_slurm_conf(topology), render_cgroup_conf())
        mark("slurmctld")
        cpus, mem = slurm_resources(instance_type_info(INSTANCE_TYPE), 1)
        servers = control.conf_server_arg([ctl.ip])

        def slurmd(inst: ProviderInstance) -> None:
            control.start_slurmd(provider.runner(cluster_id, inst.instance_id), servers, cpus, mem, COMPUTE_GROUP)

        with ThreadPoolExecutor(max_workers=min(len(computes), MAX_PARALLEL)) as pool:
            list(pool.map(slurmd, computes))
        mark("slurmd")
        names = [c.hostname for c in computes]
        _wait_all_idle(admin.SlurmControl(ctl_runner), names)
        result.all_idle = time.monotonic() - t0
        mark("all_idle")
        if on_idle is not None:
            on_idle()
        if not probe:
            return result
        out = ctl_runner.run(list(PROBE_ARGV), timeout=JOB_TIMEOUT)
        done = time.monotonic() - t0
        res: ProbeResult = parse_probe(out.returncode, out.stdout, out.stderr)
        result.job_done = done
        result.sbatch_to_completed = res.sbatch_to_completed
        mark("job_done")
        return result
    finally:
        try:
            if service is not None:  # waits for an ensure() still running in its thread, then ends the host
                service.teardown(cluster_id)
            provider.teardown_cluster(cluster_id)  # every instance of the cluster
        finally:
            provider.close()  # the state dir's package proxy (prepare_cluster started it)
