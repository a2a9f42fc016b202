"""Drives munge and Slurm inside nodes through a provider's ``CommandRunner``.

Every command is an argv list with a timeout, run *inside* a node (never a Slurm client on the host:
the host may resolve names through DNS). Output is parsed from JSON where Slurm 22.05 offers it
(``sinfo --json``; Debian's 22.05 scontrol has no ``--json``). Module functions take the runner of
the node they act on; ``admin.SlurmControl`` wraps the runner of the (primary) controller for admin
commands.

Topology changes restart slurmctld gracefully (``restart_slurmctld``); ``scontrol reconfigure`` is
never used (it can kill slurmctld and lose jobs on 22.05, reference/local-slurm.md §3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

from slurmpod.providers.base import CommandResult, CommandRunner, NodeFile
from slurmpod.providers.nodefiles import write_files
from slurmpod.slurm.conf import (
    DEFAULT_STATE_SAVE_LOCATION,
    SLURMCTLD_LOG_FILE,
    SLURMCTLD_PID_FILE,
    SLURMCTLD_PORT,
    SLURMD_LOG_FILE,
    SLURMD_PID_FILE,
    SLURMD_SPOOL_DIR,
    conf_value,
)
from slurmpod.slurm.gres import GRES_CONF, render_gres_conf

SLURM_CONF = "/etc/slurm/slurm.conf"
CGROUP_CONF = "/etc/slurm/cgroup.conf"
PLUGSTACK_CONF = "/etc/slurm/plugstack.conf"
#: SPANK plugins, served to every node by configless Slurm (replacing Debian's include of plugstack.conf.d/*,
#: which configless does not ship); ``optional``: an image without the plugin still runs srun
PLUGSTACK = ("# slurmpod: SPANK plugins (configless Slurm serves this file to every node)\n"
             "optional /usr/lib/slurmpod/spank_auto_resume.so\n"
             "optional /usr/lib/slurmpod/spank_containers.so\n")
OCI_CONF = "/etc/slurm/oci.conf"
#: Slurm's native ``--container=BUNDLE`` (an OCI bundle on the node): Debian's crun, rootless, SchedMD's suggested
#: one-shot set (configless serves the file; the bundle's config.json must be a rootless one, e.g. ``crun spec
#: --rootless``)
_CRUN = "crun --rootless=true --root=/tmp/"
OCI = ("# slurmpod: Slurm's own --container (configless Slurm serves this file to every node)\n"
       f'RunTimeQuery="{_CRUN} state %n.%u.%j.%s.%t"\n'
       f'RunTimeKill="{_CRUN} kill -a %n.%u.%j.%s.%t"\n'
       f'RunTimeDelete="{_CRUN} delete --force %n.%u.%j.%s.%t"\n'
       f'RunTimeRun="{_CRUN} run --bundle %b %n.%u.%j.%s.%t"\n')
#: where AWS's sample lifecycle scripts look for slurm.conf (SPEC §6); a symlink on every node
OPT_SLURM_CONF = "/opt/slurm/etc/slurm.conf"
#: slurmd's configless cache link on compute nodes
CONFIGLESS_SLURM_CONF = "/run/slurm/conf/slurm.conf"
MUNGE_KEY = "/etc/munge/munge.key"
MUNGE_SOCKET = "/run/munge/munge.socket.2"
MUNGE_LOG_FILE = "/var/log/munge/munged.log"
REASON_PREFIX = "slurmpod: "

CMD_TIMEOUT = 30.0
LOG_TAIL_LINES = 30
POLL_INTERVAL = 0.05


class SlurmError(Exception):
    """A Slurm/munge operation failed; ``log_tail`` has the last lines of the relevant daemon log."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message if not log_tail else f"{message}\n--- log tail ---\n{log_tail}")
        self.message = message
        self.log_tail = log_tail


Sleep = Callable[[float], None]
Clock = Callable[[], float]


def _run(
    runner: CommandRunner, argv: Sequence[str], *, timeout: float = CMD_TIMEOUT, input: bytes | None = None
) -> CommandResult:
    return runner.run(list(argv), timeout=timeout, input=input)


def _check(
    runner: CommandRunner,
    argv: Sequence[str],
    *,
    timeout: float = CMD_TIMEOUT,
    input: bytes | None = None,
    log: str | None = None,
) -> CommandResult:
    r = _run(runner, argv, timeout=timeout, input=input)
    if r.returncode != 0:
        detail = (r.stderr or r.stdout).strip()
        raise SlurmError(
            f"{' '.join(argv)} failed (exit {r.returncode}): {detail}",
            log_tail(runner, log) if log else "",
        )
    return r


def log_tail(runner: CommandRunner, path: str, lines: int = LOG_TAIL_LINES) -> str:
    """Last lines of a file inside the node ('' when unreadable)."""
    r = _run(runner, ["tail", "-n", str(lines), path], timeout=10)
    return r.stdout if r.returncode == 0 else ""


def _split_owner(owner: str) -> tuple[str, str]:
    user, _, group = owner.partition(":")
    return user, group or user


def write_file(
    runner: CommandRunner, path: str, content: bytes, mode: int = 0o644, owner: str = "root"
) -> None:
    """Writes ``content`` to ``path`` inside the node: a temp file next to it, then a rename (atomic).

    ``owner`` is ``user`` or ``user:group``; parent directories are created.
    """
    user, group = _split_owner(owner)
    tmp = f"{path}.slurmpod-tmp"
    _check(
        runner,
        ["install", "-D", "-m", f"{mode:04o}", "-o", user, "-g", group, "/dev/stdin", tmp],
        input=content,
    )
    _check(runner, ["mv", "-f", tmp, path])


def ensure_dir(runner: CommandRunner, path: str, mode: int = 0o755, owner: str = "root") -> None:
    user, group = _split_owner(owner)
    _check(runner, ["install", "-d", "-m", f"{mode:04o}", "-o", user, "-g", group, path])


#: ``link_opt_slurm_conf`` in one in-node command (it was up to four: two tests, install -d, ln); $1 the target
LINK_OPT_SLURM_CONF = f"""t=$1
[ {OPT_SLURM_CONF} -ef "$t" ] && exit 0
# /opt/slurm/etc -> /etc/slurm: slurm.conf there points at the target (e.g. the configless cache)
[ -L /opt/slurm/etc ] && exec ln -sfn "$t" {SLURM_CONF}
install -d -m 0755 -o root -g root /opt/slurm/etc && exec ln -sfn "$t" {OPT_SLURM_CONF}
"""


def link_opt_slurm_conf(runner: CommandRunner, target: str) -> None:
    """``/opt/slurm/etc/slurm.conf`` -> ``target`` (AWS sample scripts read that path).

    Nothing to do when the path already is ``target`` (e.g. the image links /opt/slurm/etc to /etc/slurm).
    """
    _check(runner, ["sh", "-c", LINK_OPT_SLURM_CONF, "sh", target], timeout=10)


def _wait(predicate: Callable[[], bool], timeout: float, sleep: Sleep, clock: Clock) -> bool:
    deadline = clock() + timeout
    while True:
        if predicate():
            return True
        if clock() >= deadline:
            return False
        sleep(POLL_INTERVAL)


#: the PID in a pid file, else (a systemd node: Slurm 24.11 under ``--systemd`` writes no pid file) the unit's
#: MainPID; printed only if that process is alive and is ``comm`` (guards against PID reuse); one command
_READ_PID = ('p=$(cat "$1" 2>/dev/null); if [ -z "$p" ] && [ -n "$3" ] && [ -d /run/systemd/system ]; then '
             'p=$(systemctl show -p MainPID --value "$3" 2>/dev/null); fi; case "$p" in ""|0|*[!0-9]*) exit 1;; esac; '
             '[ "$(cat /proc/$p/comm 2>/dev/null)" = "$2" ] && echo "$p"')


def read_pid(runner: CommandRunner, pid_file: str, comm: str) -> int | None:
    """PID of daemon ``comm``: from ``pid_file``, or its unit's MainPID on a systemd node; None if not running."""
    r = _run(runner, ["sh", "-c", _READ_PID, "sh", pid_file, comm, units.UNITS.get(comm, "")], timeout=10)
    out = r.stdout.strip()
    return int(out) if r.returncode == 0 and out.isdigit() else None


def _alive(runner: CommandRunner, pid: int) -> bool:
    return _run(runner, ["kill", "-0", str(pid)], timeout=10).returncode == 0


def stop_daemon(
    runner: CommandRunner,
    pid_file: str,
    comm: str,
    timeout: float = 60.0,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
) -> bool:
    """SIGTERM the daemon of ``pid_file`` and wait for it to exit. False if it was not running.

    On a systemd node the daemon's unit is stopped instead (systemd would restart a killed one)."""
    if comm in units.UNITS and units.uses_systemd(runner):
        return units.stop(runner, comm)
    pid = read_pid(runner, pid_file, comm)
    if pid is None:
        return False
    _run(runner, ["kill", "-TERM", str(pid)], timeout=10)
    if not _wait(lambda: not _alive(runner, pid), timeout, sleep, clock):
        raise SlurmError(f"{comm} (pid {pid}) did not exit within {timeout:.0f}s after SIGTERM")
    return True


# --- munge -----------------------------------------------------------------------------------------


def _munge_ok(runner: CommandRunner) -> bool:
    return _run(runner, ["munge", "-n"], timeout=10).returncode == 0


def munge_key_file(key: bytes) -> NodeFile:
    """The cluster's munge key as a node file (0400, owned by the image's munge user)."""
    return NodeFile(MUNGE_KEY, key, 0o400, "munge")


def start_munge(
    runner: CommandRunner,
    key: bytes,
    timeout: float = 10.0,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
) -> None:
    """Installs the cluster key and starts munged as user munge; returns once credentials can be made.

    Idempotent: a munged that already answers is left alone.
    """
    if _munge_ok(runner):
        return
    if units.uses_systemd(runner):
        units.start_munge(runner, key)
        if not _wait(lambda: _munge_ok(runner), timeout, sleep, clock):
            raise SlurmError("munge.service did not start", units.journal(runner, "munge"))
        return
    ensure_dir(runner, "/etc/munge", 0o700, "munge")
    ensure_dir(runner, "/var/log/munge", 0o700, "munge")
    ensure_dir(runner, "/var/lib/munge", 0o711, "munge")
    ensure_dir(runner, "/run/munge", 0o755, "munge")
    write_file(runner, MUNGE_KEY, key, 0o400, "munge")
    _check(
        runner,
        ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "/usr/sbin/munged", "--num-threads=2"],
        log=MUNGE_LOG_FILE,
    )
    if not _wait(lambda: _munge_ok(runner), timeout, sleep, clock):
        raise SlurmError("munged did not start", log_tail(runner, MUNGE_LOG_FILE))


# --- slurmctld -------------------------------------------------------------------------------------


def parse_ping(text: str) -> dict[str, bool]:
    """``scontrol ping`` (22.05 has no JSON for it) -> {hostname: is UP}.

    Lines look like ``Slurmctld(primary) at ctl1 is UP`` / ``Slurmctld(backup) at ctl2 is DOWN``.
    """
    status: dict[str, bool] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 5 and words[0].startswith("Slurmctld(") and words[1] == "at" and words[3] == "is":
            status[words[2]] = words[4] == "UP"
    return status


def ping(runner: CommandRunner) -> dict[str, bool]:
    """Controllers as seen from inside the node of ``runner``."""
    r = _run(runner, ["scontrol", "ping"], timeout=CMD_TIMEOUT)
    return parse_ping(r.stdout)


def _hostname(runner: CommandRunner) -> str:
    return _check(runner, ["hostname"]).stdout.strip()


def write_controller_conf(runner: CommandRunner, conf_text: str, cgroup_text: str) -> None:
    """slurm.conf + cgroup.conf + plugstack.conf + oci.conf (+ gres.conf with GresTypes; served to slurmds by
    configless), StateSaveLocation owned by slurm, log dir, and the /opt/slurm/etc link. The directories and the
    files slurmctld reads only when it starts go in one ``tar -x``; slurm.conf, which a running slurmctld may read
    at any time, is replaced atomically (temp file + rename)."""
    state = conf_value(conf_text, "StateSaveLocation") or DEFAULT_STATE_SAVE_LOCATION
    files = [NodeFile(CGROUP_CONF, cgroup_text.encode(), 0o644), NodeFile(PLUGSTACK_CONF, PLUGSTACK.encode(), 0o644),
             NodeFile(OCI_CONF, OCI.encode(), 0o644)]
    if conf_value(conf_text, "GresTypes"):  # configless serves it; each node's own lines are included
        files.append(NodeFile(GRES_CONF, render_gres_conf().encode(), 0o644))
    # (no entry for /etc/slurm itself: images link it to /opt/slurm/etc, and the files' parents are made anyway)
    write_files(runner, files, (("/var/log/slurm", 0o755, "slurm"), (state, 0o755, "slurm")))
    write_file(runner, SLURM_CONF, conf_text.encode(), 0o644)
    link_opt_slurm_conf(runner, SLURM_CONF)


def _running(runner: CommandRunner, comm: str) -> bool:
    """Whether a process named ``comm`` runs in the node (the pidfile may lag behind a daemonizing start)."""
    return _run(runner, ["pgrep", "-x", comm], timeout=10).returncode == 0


def slurmctld_running(runner: CommandRunner) -> bool:
    """Whether slurmctld runs in the node (systemd may have started it when the node booted)."""
    return read_pid(runner, SLURMCTLD_PID_FILE, "slurmctld") is not None or _running(runner, "slurmctld")


def _start_and_wait_slurmctld(runner: CommandRunner, timeout: float, sleep: Sleep, clock: Clock,
                              autostart: bool = True) -> None:
    me = _hostname(runner)
    if units.uses_systemd(runner):
        units.start(runner, "slurmctld", autostart)
    elif not slurmctld_running(runner):
        _check(runner, ["/usr/sbin/slurmctld"], log=SLURMCTLD_LOG_FILE)
    gone_since: list[float] = []

    def up() -> bool:
        if ping(runner).get(me):
            return True
        if not slurmctld_running(runner):
            # it may still be daemonizing (or handing over to a restart): dead only if gone for a while
            if not gone_since:
                gone_since.append(clock())
            elif clock() - gone_since[0] > 2.0:
                raise SlurmError(f"slurmctld on {me} exited", log_tail(runner, SLURMCTLD_LOG_FILE))
        else:
            gone_since.clear()
        return False

    if not _wait(up, timeout, sleep, clock):
        raise SlurmError(
            f"slurmctld on {me} not answering after {timeout:.0f}s", log_tail(runner, SLURMCTLD_LOG_FILE)
        )


def start_slurmctld(
    runner: CommandRunner,
    conf_text: str,
    cgroup_text: str,
    timeout: float = 30.0,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
    autostart: bool = True,
    write: bool = True,
) -> None:
    """Writes the confs and starts slurmctld (if not running); returns once ``scontrol ping`` run in
    this node reports this controller UP. ``autostart=False``: slurmctld does not start by itself when the node
    boots again (systemd nodes). ``write=False``: the node already has these confs (its baseline wrote them)."""
    if write:
        write_controller_conf(runner, conf_text, cgroup_text)
    _start_and_wait_slurmctld(runner, timeout, sleep, clock, autostart)


def start_configured_slurmctld(runner: CommandRunner, timeout: float = 30.0) -> None:
    """Starts slurmctld on the conf already in the node (if not running) and waits until it answers ping."""
    _start_and_wait_slurmctld(runner, timeout, time.sleep, time.monotonic)


def restart_slurmctld(
    runner: CommandRunner,
    conf_text: str,
    cgroup_text: str,
    timeout: float = 60.0,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
) -> None:
    """Graceful restart with a new conf: SIGTERM (state is saved, jobs keep running), wait for exit,
    write the confs, start, wait for ping. For HA call it on the backups first, then the primary."""
    stop_daemon(runner, SLURMCTLD_PID_FILE, "slurmctld", timeout, sleep, clock)
    start_slurmctld(runner, conf_text, cgroup_text, timeout, sleep, clock)


# --- slurmd / login ----------------------------------------------------------------------------------


def conf_server_arg(controller_ips: Iterable[str], port: int = SLURMCTLD_PORT) -> list[str]:
    """``["10.0.0.10:6817", ...]`` for ``--conf-server`` (order = primary first)."""
    return [f"{ip}:{port}" for ip in controller_ips]


def slurmd_argv(
    conf_servers: Sequence[str], cpus: int, real_memory: int, feature: str, gres: str | None = None
) -> list[str]:
    """The dynamic-node slurmd command line (reference/local-slurm.md §3c)."""
    node_conf = f"CPUs={cpus} RealMemory={real_memory} Feature={feature}"
    if gres:
        node_conf += f" Gres={gres}"
    return ["/usr/sbin/slurmd", "-Z", "--conf-server", ",".join(conf_servers), "--conf", node_conf]


def start_slurmd(
    runner: CommandRunner,
    conf_servers: Sequence[str],
    cpus: int,
    real_memory: int,
    feature: str,
    gres: str | None = None,
    timeout: float = 15.0,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
    prepared: bool = False,
) -> None:
    """Starts a configless dynamic slurmd (if not running) and links /opt/slurm/etc/slurm.conf to
    the configless cache. Registration is confirmed on the controller (``wait_for_nodes``). ``prepared``: the
    node's boot already made slurmd's directories, wrapper and arguments (``units.prepare_slurmd``)."""
    if not conf_servers:
        raise ValueError("start_slurmd needs at least one conf server")
    if not prepared:
        ensure_dir(runner, "/var/log/slurm", 0o755, "slurm")
        ensure_dir(runner, SLURMD_SPOOL_DIR, 0o755)
    ready = False
    if units.uses_systemd(runner):
        ready = units.start_slurmd(runner, conf_servers, units.node_conf(cpus, real_memory, feature, gres),
                                   prepared=prepared)
    elif read_pid(runner, SLURMD_PID_FILE, "slurmd") is None:
        _check(runner, slurmd_argv(conf_servers, cpus, real_memory, feature, gres), log=SLURMD_LOG_FILE)
    if not ready and not _wait(lambda: read_pid(runner, SLURMD_PID_FILE, "slurmd") is not None, timeout, sleep,
                               clock):
        raise SlurmError("slurmd did not start", log_tail(runner, SLURMD_LOG_FILE))
    link_opt_slurm_conf(runner, CONFIGLESS_SLURM_CONF)


def stop_slurmd(
    runner: CommandRunner, timeout: float = 30.0, sleep: Sleep = time.sleep, clock: Clock = time.monotonic
) -> bool:
    """SIGTERM slurmd and wait (running job steps survive a slurmd restart). False if not running."""
    return stop_daemon(runner, SLURMD_PID_FILE, "slurmd", timeout, sleep, clock)


def configure_login(runner: CommandRunner, conf_text: str) -> None:
    """Login node (munge only, no slurmd in 22.05): a copy of the controllers' slurm.conf in
    /etc/slurm, so sinfo/sbatch work in any shell without environment variables.

    Clients only need SlurmctldHost/ports from it; rewrite it when the controllers change.
    """
    ensure_dir(runner, "/etc/slurm")
    write_file(runner, SLURM_CONF, conf_text.encode(), 0o644)
    link_opt_slurm_conf(runner, SLURM_CONF)


from slurmpod.slurm import units  # noqa: E402  (units calls back into this module's helpers)
