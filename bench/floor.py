"""The floor: the seed topology's daemons started by a plain script, without slurmpod's control plane.

Uses the same building blocks slurmpod uses underneath (``LocalProvider`` for the namespaces and the
overlay roots, ``render_slurm_conf`` and ``slurmpod.slurm.control``'s start functions), but no API,
store, reconciler or boot phases: launch the 3 nodes (in parallel), munged on each, slurmctld, the
2 dynamic slurmds (in parallel), wait until both are idle, then run the first-job probe.
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
from slurmpod.lifecycle.images import BUILTIN
from slurmpod.providers.base import InstanceRequest, ProviderInstance, VolumeMount
from slurmpod.providers.local.provider import LocalProvider
from slurmpod.slurm import control
from slurmpod.slurm.conf import SlurmTopology, render_cgroup_conf, render_slurm_conf

INSTANCE_TYPE = "ml.t3.medium"
COMPUTE_GROUP = "compute-group"
PARTITION = "compute"
JOIN_TIMEOUT = 60.0
# the same volumes SlurmRuntime gives its nodes (slurm_runtime.STATE_VOLUME / HOME_VOLUME)
STATE_VOLUME = VolumeMount("slurm-state", "/var/lib/slurm/slurmctld")
HOME_VOLUME = VolumeMount("home", "/home")


class FloorError(RuntimeError):
    """A floor run did not reach its goal."""


@dataclass
class FloorRun:
    """Seconds from t0 (nothing exists) for one floor run."""

    all_idle: float = 0.0
    job_done: float = 0.0
    sbatch_to_completed: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds since t0 when it ended


def _request(cluster_id: str, group: str, volumes: tuple[VolumeMount, ...]) -> InstanceRequest:
    return InstanceRequest(
        cluster_id=cluster_id, instance_id=ids.new_instance_id(), group=group, instance_type=INSTANCE_TYPE,
        image_id=BUILTIN.image_id, image_root=BUILTIN.root, volumes=volumes,
        labels={"slurmpod/cluster": "bench-floor", "slurmpod/group": group},
    )


def _wait_all_idle(ctl: control.SlurmControl, names: list[str], timeout: float = JOIN_TIMEOUT) -> None:
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
              probe: bool = True) -> FloorRun:
    """One floor run in ``state_dir`` (created if needed); tears its cluster down before returning.
    ``on_idle`` is called once every node is idle (memory is measured there); ``probe`` runs the first job."""
    provider = LocalProvider(state_dir)
    cluster_id = ids.new_cluster_id()
    key = secrets.token_bytes(1024)
    result = FloorRun()
    try:
        t0 = time.monotonic()

        def mark(phase: str) -> None:
            result.phases[phase] = time.monotonic() - t0

        provider.prepare_cluster(cluster_id)
        requests = [_request(cluster_id, "controller-group", (STATE_VOLUME, HOME_VOLUME))]
        requests += [_request(cluster_id, COMPUTE_GROUP, (HOME_VOLUME,)) for _ in range(compute_count)]

        def launch_and_munge(req: InstanceRequest) -> ProviderInstance:
            inst = provider.launch(req)
            control.start_munge(provider.runner(cluster_id, req.instance_id), key)
            return inst

        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            instances = list(pool.map(launch_and_munge, requests))
        mark("launched+munged")
        ctl, computes = instances[0], instances[1:]
        ctl_runner = provider.runner(cluster_id, ctl.instance_id)
        topology = SlurmTopology(
            cluster_name="floor", controllers=((ctl.hostname, ctl.ip),),
            compute_groups=((COMPUTE_GROUP, PARTITION),),
        )
        control.start_slurmctld(ctl_runner, render_slurm_conf(topology), render_cgroup_conf())
        mark("slurmctld")
        cpus, mem = slurm_resources(instance_type_info(INSTANCE_TYPE), 1)
        servers = control.conf_server_arg([ctl.ip])

        def slurmd(inst: ProviderInstance) -> None:
            control.start_slurmd(provider.runner(cluster_id, inst.instance_id), servers, cpus, mem, COMPUTE_GROUP)

        with ThreadPoolExecutor(max_workers=len(computes)) as pool:
            list(pool.map(slurmd, computes))
        mark("slurmd")
        names = [c.hostname for c in computes]
        _wait_all_idle(control.SlurmControl(ctl_runner), names)
        result.all_idle = time.monotonic() - t0
        mark("all_idle")
        if on_idle is not None:
            on_idle()
        if not probe:
            return result
        probe = ctl_runner.run(list(PROBE_ARGV), timeout=JOB_TIMEOUT)
        done = time.monotonic() - t0
        res: ProbeResult = parse_probe(probe.returncode, probe.stdout, probe.stderr)
        result.job_done = done
        result.sbatch_to_completed = res.sbatch_to_completed
        mark("job_done")
        return result
    finally:
        provider.teardown_cluster(cluster_id)
