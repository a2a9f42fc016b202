"""Several head nodes: who is in charge, hand-over before a stop, and moving every daemon to a new controller list.

Slurm's rules (22.05): controllers are tried in ``SlurmctldHost`` order and the first live one is in charge;
``scontrol takeover N`` makes backup N take control at once instead of after SlurmctldTimeout. A controller
replaced by a new instance comes back at a new address, so the other controllers, every slurmd
(``--conf-server``) and the login nodes' conf copies must be moved to the new list.

Everything here runs commands through ``runner_of(node)``; nothing touches the store.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from slurmpod.domain.catalog import instance_type_info, slurm_gres, slurm_resources
from slurmpod.domain.model import NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec
from slurmpod.domain.status import NodeType
from slurmpod.providers.base import CommandRunner, ProviderError
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.slurm import control
from slurmpod.slurm.conf import SLURMCTLD_PORT, render_cgroup_conf

log = logging.getLogger("slurmpod.runtime")

RunnerOf = Callable[[NodeRecord], CommandRunner]


def ctld_hosts(conf: str) -> list[str]:
    """The ``SlurmctldHost=`` lines of a slurm.conf, in order."""
    return [line.strip() for line in conf.splitlines() if line.strip().startswith("SlurmctldHost=")]


def hand_over(node: NodeRecord, ctls: Sequence[NodeRecord], alive: Mapping[str, bool], runner_of: RunnerOf) -> None:
    """Before the controller in charge (``node``) stops: ``scontrol takeover`` on the first live backup, so clients
    never wait SlurmctldTimeout for a failover. ``ctls`` in SlurmctldHost order, ``node`` among them."""
    if len(ctls) < 2:
        return
    backups = [(i, n) for i, n in enumerate(ctls) if n.instance_id != node.instance_id
               and alive.get(n.instance_id, False)]
    if not backups:
        return
    index, backup = backups[0]
    r = runner_of(backup)
    state = control.ping(r)
    serving = [n for n in ctls if state.get(n.hostname or "", False)]
    if not serving or serving[0].instance_id != node.instance_id:
        return  # not the controller in charge (the first live one in SlurmctldHost order)
    res = r.run(["scontrol", "takeover", str(index)], timeout=30)
    if res.returncode != 0:
        log.warning("controller %s: scontrol takeover %d failed: %s", backup.instance_id, index,
                    (res.stderr or res.stdout).strip())
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if r.run(["squeue", "-h", "-o", "%i"], timeout=15).returncode == 0:
            log.info("controller %s took over from %s", backup.instance_id, node.instance_id)
            return
        time.sleep(0.2)
    log.warning("controller %s: did not answer within 20 s after takeover", backup.instance_id)


#: how long a refusal rule can outlive a stop that never removed it (a server killed meanwhile): the node's
#: next slurmctld is refused for at most this long
REFUSE_AT_MOST = timedelta(seconds=30)
#: for the connections already in slurmctld's accept queue to be served before it stops
DRAIN_SECONDS = 0.3


@contextlib.contextmanager
def refusing_clients(runner: CommandRunner, *, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                     sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """While a controller's slurmctld stops: its node answers new connections to SlurmctldPort with a TCP reset
    (``iptables ... REJECT --reject-with tcp-reset``), so a client (squeue, srun, slurmd) that tries it first sees
    "connection refused" and goes on to the next ``SlurmctldHost`` at once. Without it, a connection accepted by
    the kernel just before slurmctld closed its socket is reset mid-request and the client fails ("Connection
    reset by peer"), since Slurm retries only refused connections on the next controller.

    The rule ends by itself (``-m time --datestop``, REFUSE_AT_MOST) if it is never removed; it is removed when
    the block ends. Best effort: a node without iptables stops as before."""
    until = (now() + REFUSE_AT_MOST).strftime("%Y-%m-%dT%H:%M:%S")
    rule = ["INPUT", "-p", "tcp", "--dport", str(SLURMCTLD_PORT), "--syn", "-m", "time", "--datestop", until,
            "-j", "REJECT", "--reject-with", "tcp-reset"]
    try:
        added = runner.run(["iptables", "-w", "5", "-I", *rule], timeout=15).returncode == 0
    except ProviderError:
        added = False
    if added:
        log.info("slurmctld stopping: new connections refused until it is down (at most until %s UTC)", until)
        sleep(DRAIN_SECONDS)
    else:
        log.info("cannot refuse new slurmctld connections while it stops (no iptables in the node?)")
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ProviderError):
                runner.run(["iptables", "-w", "5", "-D", *rule], timeout=15)


def _started_backup(n: NodeRecord, primary: NodeRecord, alive: Mapping[str, bool]) -> bool:
    """A live controller other than ``primary`` that has started its slurmctld once (a controller still booting
    starts its own, after the primary)."""
    return n.instance_id != primary.instance_id and alive.get(n.instance_id, False) and "daemons" in n.phases


def stop_backups(node: NodeRecord, ctls: Sequence[NodeRecord], alive: Mapping[str, bool],
                 runner_of: RunnerOf) -> None:
    """Before the primary (``node``, first in ``ctls``) starts on a release where its reclaiming control blocks
    clients (``slurm_release.primary_reclaim_blocks_clients``): the live backups stop gracefully (the one in
    control saves its state), so the primary starts in control at once instead of asking a backup for it. For the
    few seconds no controller runs, clients retry their refused connection (for up to MessageTimeout)."""
    for n in ctls:
        if not _started_backup(n, node, alive):
            continue
        try:
            r = runner_of(n)
            with refusing_clients(r):
                control.stop_daemon(r, control.SLURMCTLD_PID_FILE, "slurmctld", timeout=60)
            log.info("controller %s: slurmctld stopped while the primary %s starts", n.instance_id,
                     node.instance_id)
        except (control.SlurmError, ProviderError) as exc:
            log.warning("controller %s: stopping slurmctld before the primary starts failed: %s", n.instance_id,
                        exc)


def start_backups(node: NodeRecord, ctls: Sequence[NodeRecord], alive: Mapping[str, bool],
                  runner_of: RunnerOf) -> None:
    """After ``stop_backups`` (or a restart of the server in between): every live backup runs slurmctld again,
    in standby under the primary."""
    for n in ctls:
        if not _started_backup(n, node, alive):
            continue
        try:
            control.start_configured_slurmctld(runner_of(n))
        except (control.SlurmError, ProviderError) as exc:
            log.warning("controller %s: starting slurmctld again after the primary failed: %s", n.instance_id, exc)


def wait_for_controller_in_charge(ctls: Sequence[NodeRecord], runner_of: RunnerOf, timeout: float = 60.0,
                                  prefer_primary: float = 20.0) -> None:
    """With several controllers, slurmd must not start before one is in charge: a slurmd that reaches a backup
    still in standby can hang on the closed connection (seen with Slurm 22.05). Waits for the primary (first in
    SlurmctldHost order); after ``prefer_primary`` seconds any live controller will do."""
    start = time.monotonic()
    while True:
        states: dict[str, bool] = {}
        for n in ctls:
            try:
                states = control.ping(runner_of(n))
            except ProviderError:
                continue
            if states:
                break
        first = next(iter(states.values()), False)
        waited = time.monotonic() - start
        if first or (waited >= prefer_primary and any(states.values())):
            return
        if waited >= timeout:
            raise NodeBootError("no controller answers scontrol ping", retryable=True)
        time.sleep(0.2)


def refresh_controllers(joined: NodeRecord, ctls: Sequence[NodeRecord], alive: Mapping[str, bool],
                        runner_of: RunnerOf, conf: str) -> None:
    """The other live controllers restart gracefully with ``conf`` (the one ``joined`` started with) when their
    SlurmctldHost lines differ (a controller replaced at a new address), backups first."""
    for n in reversed(ctls):
        if n.instance_id == joined.instance_id or not alive.get(n.instance_id, False):
            continue
        r = runner_of(n)
        try:
            live = r.run(["cat", control.SLURM_CONF], timeout=30).stdout
            if ctld_hosts(live) != ctld_hosts(conf):
                log.info("controller %s: restarting slurmctld with the new controller list", n.instance_id)
                control.restart_slurmctld(r, conf, render_cgroup_conf())
        except (control.SlurmError, ProviderError) as exc:
            log.warning("controller %s: refreshing its controller list failed: %s", n.instance_id, exc)


def node_resources(group: InstanceGroupSpec) -> tuple[int, int]:
    """A compute group's CPUs and RealMemory for Slurm, from the instance-type catalogue."""
    return slurm_resources(instance_type_info(group.instance_type or "ml.t3.medium"), group.threads_per_core)


def node_gres(group: InstanceGroupSpec) -> str | None:
    """A compute group's ``Gres=`` (``gpu:h100:8``), None for CPU types."""
    return slurm_gres(instance_type_info(group.instance_type or "ml.t3.medium"))


def start_compute_slurmd(r: CommandRunner, conf_servers: Sequence[str], group: InstanceGroupSpec, *,
                         prepared: bool = False) -> None:
    """A compute group's dynamic slurmd: ``node_resources``, Feature=<group>, ``node_gres``. ``prepared``: the
    node's baseline made slurmd's directories, wrapper and arguments."""
    control.start_slurmd(r, conf_servers, *node_resources(group), group.name, node_gres(group), prepared=prepared)


def refresh_conf_servers(spec: ClusterSpec, nodes: Sequence[NodeRecord], ctls: Sequence[NodeRecord],
                         runner_of: RunnerOf, login_conf: Callable[[], str]) -> None:
    """Compute slurmds started with another ``--conf-server`` list are restarted with the current one (running
    job steps survive a slurmd restart) and fetch the new slurm.conf; login nodes get ``login_conf()``."""
    ips = [n.ip or "" for n in ctls]
    want = ",".join(control.conf_server_arg(ips))
    login = {g.name for g in spec.groups_of(NodeType.LOGIN)}
    for n in nodes:
        group = spec.group(n.group)
        if group is None or not n.active or "daemons" not in n.phases or not n.ip:
            continue
        r = runner_of(n)
        try:
            if n.group in login:
                live = r.run(["cat", control.SLURM_CONF], timeout=30).stdout
                if any(ip not in live for ip in ips):
                    control.configure_login(r, login_conf())
                continue
            if group.node_type not in (NodeType.COMPUTE, None):
                continue
            args = r.run(["pgrep", "-a", "-x", "slurmd"], timeout=30).stdout
            if not args or f"--conf-server {want} " in args:
                continue
            log.info("node %s: restarting slurmd with --conf-server %s", n.instance_id, want)
            control.stop_slurmd(r, timeout=20)
            start_compute_slurmd(r, want.split(","), group)
        except (control.SlurmError, ProviderError) as exc:
            log.warning("node %s: refreshing its controller list failed: %s", n.instance_id, exc)
