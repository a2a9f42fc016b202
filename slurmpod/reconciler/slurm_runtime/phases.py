"""Boot phases of a node (``domain.model.PHASES``), each idempotent so a restarted server can resume:

* ``launched``   the provider makes the host (namespaces, overlay root volume, address)
* ``baseline``   the image baseline: munge key and munged, Slurm dirs, cluster SSH key, log rotation,
                 ``/opt/ml/config/resource_config.json``
* ``on_create``  the group's OnCreate script from the operation's snapshot (before Slurm starts)
* ``daemons``    controller: slurmctld; compute: dynamic configless slurmd; login: client config
* ``joined``     the node is idle/usable in Slurm (compute), answers ping (controller), sinfo works (login)
* ``on_init_complete``  the group's OnInitComplete script
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.slurm_release import primary_reclaim_blocks_clients
from slurmpod.domain.spec import InstanceGroupSpec, LifeCycleConfig
from slurmpod.domain.status import NodeType
from slurmpod.lifecycle import nodeprograms
from slurmpod.lifecycle.logstreams import lifecycle_stream
from slurmpod.lifecycle.resource_config import (
    PROVISIONING_PARAMETERS_NAME,
    RESOURCE_CONFIG_PATH,
    ResourceGroup,
    ResourceInstance,
    provisioning_parameters,
    render_resource_config,
)
from slurmpod.lifecycle.run import DEFAULT_LOG_PATH, format_failure, run_lifecycle_script
from slurmpod.lifecycle.snapshot import load_snapshot
from slurmpod.providers.base import CommandRunner, NodeFile, ProviderError
from slurmpod.providers.nodefiles import write_files
from slurmpod.reconciler import headnodes
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.reconciler.slurm_runtime import gpus
from slurmpod.slurm import admin, control, units
from slurmpod.slurm.conf import (
    DEFAULT_STATE_SAVE_LOCATION,
    USER_SECTION_MARKER,
    AccountingConfig,
    conf_value,
    extract_user_lines,
    render_cgroup_conf,
    render_slurm_conf,
)

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime

log = logging.getLogger("slurmpod.runtime")

#: written on every node before any lifecycle script runs (HyperPod does the same for API-driven clusters)
PROVISIONING_PARAMETERS_PATH = "/opt/ml/config/provisioning_parameters.json"

#: slurmpod's own logs (Debian's slurmctld/slurmd/slurmdbd packages rotate /var/log/slurm: naming those files here
#: too made logrotate skip this whole file as a duplicate)
LOGROTATE = b"""/var/log/slurmpod/*.log {
    weekly
    rotate 4
    compress
    missingok
    notifempty
    copytruncate
}
"""

Phase = Callable[["SlurmRuntime", ClusterRecord, NodeRecord, InstanceGroupSpec, Sequence[NodeRecord]],
                 Mapping[str, Any]]


def launched(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
             nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
    if rt.accounting is not None and rt.wants_accounting(cluster) and group.node_type == NodeType.CONTROLLER:
        # the accounting host boots in parallel with the controller (its thread prepares the cluster's network
        # too, one of them waits for the other); daemons() waits for it
        rt.accounting.begin(cluster.cluster_id, cluster.name, rt.munge_key(cluster.cluster_id),
                            rt.external_db(cluster), rt.accounting_image(cluster))
    rt.provider.prepare_cluster(cluster.cluster_id)
    inst = rt.provider.launch(rt.request(cluster, node))
    return {"ip": inst.ip, "hostname": inst.hostname}


AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"


def boot_files(rt: SlurmRuntime, cluster: ClusterRecord, group: InstanceGroupSpec) -> list[NodeFile]:
    """What every node of ``cluster`` gets before anything runs in it: the munge key (the image's munge.service
    starts on it at first boot), the cluster's root SSH key, log rotation, provisioning_parameters.json and
    slurmpod's node programs (a compute node also the health agent's configuration, so the agent runs there). The
    provider places them on a new root volume when it can (``InstanceRequest.files``); ``baseline`` writes them
    again in one command either way."""
    private, public = rt.files.ssh_key(cluster.cluster_id)
    compute = [nodeprograms.health_config()] if group.node_type in (NodeType.COMPUTE, None) else []
    return [
        control.munge_key_file(rt.munge_key(cluster.cluster_id)),
        NodeFile("/root/.ssh/id_ed25519", private, 0o600),
        NodeFile("/root/.ssh/id_ed25519.pub", public, 0o644),
        NodeFile(AUTHORIZED_KEYS, public, 0o600),
        NodeFile("/etc/logrotate.d/slurmpod", LOGROTATE, 0o644),
        NodeFile(PROVISIONING_PARAMETERS_PATH, provisioning_parameters_json(cluster).encode(), 0o644),
        *nodeprograms.program_files(),
        *compute,
    ]


#: directories ``baseline`` makes (mode and owner set even when the image has them)
BASELINE_DIRS = (("/var/log/slurm", 0o755, "slurm"), ("/var/log/slurmpod", 0o755, "root"),
                 ("/root/.ssh", 0o700, "root"), (control.SLURMD_SPOOL_DIR, 0o755, "root"))


def baseline(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
             nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
    r = rt.runner(cluster, node)
    image = rt.image_lookup(node.image_id)
    node_conf = compute_node_conf(group) if group.node_type in (NodeType.COMPUTE, None) else None
    files = [*boot_files(rt, cluster, group),
             NodeFile(RESOURCE_CONFIG_PATH, resource_config(cluster, nodes).encode(), 0o644),
             NodeFile("/etc/slurmpod/image", f"{image.image_id} {image.release}\n".encode(), 0o644)]
    systemd = units.uses_systemd(r)
    if systemd:
        files += units.slurmd_files(node_conf)
        ctls = rt.controllers(cluster, nodes)
        ctl_ips = [n.ip for n in ctls if n.ip]
        if node_conf is not None and ctl_ips and len(ctl_ips) == len(ctls):
            # slurmd's options as daemons() would write them (it rewrites them if the controllers changed)
            files.append(units.slurmd_env(control.conf_server_arg(ctl_ips)))
    # authorized_keys on its own: an ssh host's runner merges it with the key slurmpod logs in with
    keys = next(f for f in files if f.path == AUTHORIZED_KEYS)
    write_files(r, [f for f in files if f is not keys], BASELINE_DIRS)
    control.write_file(r, keys.path, keys.content, keys.mode, keys.owner)
    control.start_munge(r, rt.munge_key(cluster.cluster_id))  # a no-op when munge.service started on the key
    gpus.write_node_gres(r, cluster.spec, group)
    if systemd:
        units.keep_slurmd_template(r, compute=node_conf is not None)
        _default_user_home(r)
    if group.node_type == NodeType.CONTROLLER:
        # HyperPod writes an API-driven cluster's slurm.conf before the lifecycle scripts run (AWS's start_slurm.sh
        # edits /opt/slurm/etc/slurm.conf and starts slurmctld itself); daemons() keeps what they add
        control.write_controller_conf(r, _controller_conf(rt, cluster, nodes, rt.accounting_address(cluster)),
                                      render_cgroup_conf())
    if image.setup_script:
        res = r.run(["bash", "-euo", "pipefail", "-s"], input=image.setup_script.encode(), timeout=600)
        if res.returncode != 0:
            tail = "\n".join((res.stdout + res.stderr).splitlines()[-10:])
            raise NodeBootError(f"image {image.image_id} ({image.release}) setup step failed with exit code "
                                f"{res.returncode}: {tail}")
    return {}


def compute_node_conf(group: InstanceGroupSpec) -> str:
    """A compute group's dynamic-node conf (what the image's slurmd wrapper adds): its resources, Feature=<group>,
    its GPUs (``Gres=gpu:h100:8``)."""
    return units.node_conf(*headnodes.node_resources(group), group.name, headnodes.node_gres(group))


def _default_user_home(r: CommandRunner) -> None:
    """``ubuntu``'s home lives on the cluster's shared /home (it hides the image's): made once, from /etc/skel."""
    # nodes boot in parallel on the same /home: build it aside and rename it into place (one of them wins)
    res = r.run(["sh", "-c", 'id -u ubuntu >/dev/null 2>&1 || exit 0; [ -d /home/ubuntu ] && exit 0; '
                 't=$(mktemp -d /home/.ubuntu.XXXXXX) && cp -a /etc/skel/. "$t"/ && chown -R ubuntu:ubuntu "$t" '
                 '&& chmod 0750 "$t" && { mv -T "$t" /home/ubuntu 2>/dev/null || { rm -rf "$t"; '
                 '[ -d /home/ubuntu ]; }; }'], timeout=30)
    if res.returncode != 0:
        raise NodeBootError(f"creating /home/ubuntu failed: {res.stderr.strip()[-300:]}")


def resource_config(cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> str:
    groups = [
        ResourceGroup(
            g.name, g.instance_type or "",
            # InstanceName is HyperPod's "<group>-<n>" (1-based, in launch order; AWS's multi-head setup looks for
            # "<group>-1"); the Slurm hostname stays ip-A-B-C-D
            tuple(ResourceInstance(n.instance_id, n.ip or "") for n in sorted(
                (n for n in nodes if n.group == g.name and n.ip and n.active),
                key=lambda n: (n.launch_time, n.instance_id))),
        )
        for g in cluster.spec.instance_groups
    ]
    return render_resource_config(groups, cluster_name=cluster.name, cluster_arn=cluster.arn)


def _script(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
            entry: str | None) -> Mapping[str, Any]:
    lcc: LifeCycleConfig | None = group.life_cycle_config
    digest = node.lifecycle_digest or cluster.lifecycle_snapshots.get(group.name)
    if lcc is None or entry is None or digest is None:
        return {}
    snap = load_snapshot(rt.snapshots_dir, digest)
    r = rt.runner(cluster, node)
    # AWS's samples open provisioning_parameters.json next to themselves: an API-driven cluster's source has none
    extra = {} if (snap.path / PROVISIONING_PARAMETERS_NAME).is_file() else {
        PROVISIONING_PARAMETERS_NAME: provisioning_parameters_json(cluster).encode()}
    try:
        result = run_lifecycle_script(
            r, snap, entry, extra_files=extra,
            env={"SAGEMAKER_RESOURCE_CONFIG_PATH": RESOURCE_CONFIG_PATH, "SLURMPOD_CLUSTER": cluster.name,
                 "SLURMPOD_INSTANCE_ID": node.instance_id, "SLURMPOD_INSTANCE_GROUP": group.name},
        )
    finally:
        _keep_log(rt, cluster, node, r)
    log.info("node %s: %s exited %d (%s)", node.instance_id, entry, result.exit_code, digest[:19])
    if not result.ok:
        raise NodeBootError(format_failure(entry, result))
    return {"script": entry}


def _keep_log(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, r: CommandRunner) -> None:
    """The node's lifecycle log, copied to the control plane (stream ``LifecycleConfig/<group>/<id>``)."""
    try:
        res = r.run(["cat", DEFAULT_LOG_PATH], timeout=30)
    except ProviderError as exc:
        log.warning("node %s: cannot copy its lifecycle log: %s", node.instance_id, exc)
        return
    if res.returncode == 0:
        rt.logs.write(cluster.cluster_id, lifecycle_stream(node.group, node.instance_id), res.stdout,
                      cluster_name=cluster.name)


def provisioning_parameters_json(cluster: ClusterRecord) -> str:
    """HyperPod's on-node provisioning_parameters.json, derived from the cluster's SlurmConfig roles."""
    spec = cluster.spec
    ctl = next((g.name for g in spec.groups_of(NodeType.CONTROLLER)), "")
    login = next((g.name for g in spec.groups_of(NodeType.LOGIN)), None)
    workers = [(g.name, part) for g in spec.groups_of(NodeType.COMPUTE)
               for part in ((g.slurm_config.partition_names if g.slurm_config else ()) or (g.name,))]
    return json.dumps(provisioning_parameters(ctl, login, workers), indent=4) + "\n"


def on_create(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
              nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
    return _script(rt, cluster, node, group, group.life_cycle_config.on_create if group.life_cycle_config else None)


def on_init_complete(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
                     nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
    entry = group.life_cycle_config.on_init_complete if group.life_cycle_config else None
    return _script(rt, cluster, node, group, entry)


def _controller_conf(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord],
                     acct: AccountingConfig | None) -> str:
    """The slurm.conf a controller starts on: the one it ran (user lines included) when its root volume was
    replaced, with the current accounting host and controller addresses; else freshly rendered."""
    saved = rt.files.saved_conf(cluster.cluster_id)
    applied = cluster.applied_topology == rt.desired_topology(cluster)
    if saved and ((acct is not None and conf_value(saved, "AccountingStorageHost") != acct.host_ip)
                  or headnodes.ctld_hosts(saved) != headnodes.ctld_hosts(rt.conf(cluster, nodes, acct))):
        # the accounting host or a controller (BatchReplace) is at a new address: same conf (user lines
        # included), new AccountingStorageHost / SlurmctldHost lines
        saved = render_slurm_conf(replace(rt.topology(cluster, nodes, acct), user_lines=extract_user_lines(saved)))
    return saved if saved and applied else rt.conf(cluster, nodes, acct)


def daemons(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
            nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
    r = rt.runner(cluster, node)
    if group.node_type == NodeType.CONTROLLER:
        # slurmctld's first start needs slurmdbd up ("we have no TRES from it" is fatal without state files)
        acct = rt.ensure_accounting(cluster)
        conf = _controller_conf(rt, cluster, nodes, acct)
        live = r.run(["cat", control.SLURM_CONF], timeout=30)
        if live.returncode == 0 and live.stdout != conf:
            # lines the lifecycle scripts added to the conf baseline wrote (AWS's start_slurm.sh appends
            # Prolog/Epilog) are kept; a slurmctld a script started on the old text is restarted on the new one
            user = extract_user_lines(live.stdout)
            if USER_SECTION_MARKER in live.stdout.splitlines() and user != extract_user_lines(conf):
                conf = render_slurm_conf(replace(rt.topology(cluster, nodes, acct), user_lines=user))
            if live.stdout != conf:
                control.stop_daemon(r, control.SLURMCTLD_PID_FILE, "slurmctld", timeout=60)
        ctls = rt.controllers(cluster, nodes)
        # a primary with backups, on a Slurm whose reclaiming control blocks clients: the backups stop while it
        # starts, and it does not start by itself when its node boots (a reboot goes through here again); one
        # systemd started at the node's boot is already reclaiming: nothing to gain then
        blocks = len(ctls) > 1 and ctls[0].instance_id == node.instance_id and \
            primary_reclaim_blocks_clients(rt.image_lookup(node.image_id).slurm_version)
        careful = blocks and not control.slurmctld_running(r)
        if ctls and ctls[0].instance_id != node.instance_id:
            _wait_for_shared_state(r)
        elif careful:
            headnodes.stop_backups(node, ctls, rt.alive(cluster), rt.runner_of(cluster))
        try:
            # the confs baseline wrote are still the ones to run: not written twice
            control.start_slurmctld(r, conf, render_cgroup_conf(), autostart=not blocks,
                                    write=live.returncode != 0 or live.stdout != conf)
        finally:
            if careful:
                headnodes.start_backups(node, ctls, rt.alive(cluster), rt.runner_of(cluster))
        rt.files.save_conf(cluster.cluster_id, conf)
        return {"applied_topology": rt.desired_topology(cluster)}
    if group.node_type == NodeType.LOGIN:
        control.configure_login(r, rt.conf(cluster, nodes))
        return {}
    ctls = rt.controllers(cluster, nodes)
    if not ctls:
        raise NodeBootError("no controller is running", retryable=True)
    if len(ctls) > 1:
        headnodes.wait_for_controller_in_charge(ctls, rt.runner_of(cluster))
    # the baseline on this root volume made slurmd's directories, wrapper and arguments (systemd nodes)
    headnodes.start_compute_slurmd(r, control.conf_server_arg(n.ip or "" for n in ctls), group,
                                   prepared="baseline" in node.phases)
    return {}


def joined(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, group: InstanceGroupSpec,
           nodes: Sequence[NodeRecord]) -> Mapping[str, Any]:
    r = rt.runner(cluster, node)
    if group.node_type == NodeType.CONTROLLER:
        if not any(control.ping(r).values()):
            raise NodeBootError("slurmctld does not answer scontrol ping")
        ctls = rt.controllers(cluster, nodes)
        conf = rt.files.saved_conf(cluster.cluster_id)
        if conf:
            headnodes.refresh_controllers(node, ctls, rt.alive(cluster), rt.runner_of(cluster), conf)
        headnodes.refresh_conf_servers(cluster.spec, nodes, ctls, rt.runner_of(cluster),
                                       lambda: rt.conf(cluster, nodes))
        return {}
    if group.node_type == NodeType.LOGIN:
        res = r.run(["sinfo", "-h"], timeout=30)
        if res.returncode != 0:
            raise NodeBootError(f"sinfo fails on the login node: {res.stderr.strip()[-300:]}")
        return {}
    primary = rt.primary(cluster, nodes)
    if primary is None:
        raise NodeBootError("no controller is running", retryable=True)
    name = node.hostname or ""
    done = admin.SlurmControl(primary).wait_for_nodes([name], rt.join_timeout)
    if name not in done:
        tail = control.log_tail(r, "/var/log/slurm/slurmd.log")
        raise NodeBootError(f"node {name} did not join Slurm within {rt.join_timeout:.0f}s; slurmd log: {tail}")
    return {}


def _wait_for_shared_state(r: CommandRunner, timeout: float = 30.0) -> None:
    """A backup controller starts only once the shared StateSaveLocation is initialised: two slurmctlds creating
    its ``clustername`` file at once can read it half-written and die ("CLUSTER NAME MISMATCH", seen here)."""
    path = f"{DEFAULT_STATE_SAVE_LOCATION}/clustername"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if r.run(["test", "-s", path], timeout=10).returncode == 0:
            return
        time.sleep(0.2)
    log.warning("%s still missing after %.0f s; starting slurmctld anyway", path, timeout)


#: phase name -> its step (the names are ``domain.model.PHASES``)
PHASES: dict[str, Phase] = {
    "launched": launched, "baseline": baseline, "on_create": on_create, "daemons": daemons, "joined": joined,
    "on_init_complete": on_init_complete,
}
