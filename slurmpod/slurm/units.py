"""munge and the Slurm daemons as systemd units, on nodes whose PID 1 is systemd (image root filesystems).

``control.py`` calls these when ``uses_systemd(runner)``: the daemons are the image's units (``Restart=on-failure``,
logs in the journal and ``/var/log/slurm``), started with ``systemctl`` exactly as a HyperPod node's lifecycle
scripts do. The compute node's ``slurmd.service`` is HyperPod's: ``ExecStart=/opt/slurm/sbin/slurmd -D -s
${SLURMD_OPTIONS}``, rendered with ``--conf-server`` like AWS's sample ``start_slurm.sh`` does (envsubst). A
dynamic node also needs ``-Z --conf "CPUs=… Feature=<group>"``: ``/opt/slurm/sbin/slurmd`` is a small wrapper
that adds what ``/etc/slurmpod/slurmd.args`` holds (unless the command line has ``-Z`` already), so a unit
rendered by a user's own script registers the node the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import slurmpod.slurm.control as control
from slurmpod.providers.base import CommandRunner, InitAware, NodeFile
from slurmpod.providers.nodefiles import write_files

SYSTEMD_RUN_DIR = "/run/systemd/system"
SLURMD_UNIT = "/etc/systemd/system/slurmd.service"
#: the image's pristine unit (with the ${SLURMD_OPTIONS} placeholder), kept before anything renders it
SLURMD_TEMPLATE = "/etc/slurmpod/slurmd.service.in"
HEALTH_UNIT = "slurmpod-health.service"  # lifecycle.nodeprograms: a compute node's health agent
SLURMD_ARGS = "/etc/slurmpod/slurmd.args"
#: the image's slurmd.service reads SLURMD_OPTIONS from here (the node layer writes that EnvironmentFile line)
SLURMD_ENV = "/etc/slurmpod/slurmd.env"
SLURMD_WRAPPER = "/opt/slurm/sbin/slurmd"
PLACEHOLDER = "${SLURMD_OPTIONS}"
#: daemon (process name) -> its unit
UNITS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "slurmdbd": "slurmdbd",
         "mariadbd": "mariadb"}

WRAPPER = """#!/bin/sh
# slurmpod: Debian's slurmd, plus this node's dynamic-node arguments (one per line in /etc/slurmpod/slurmd.args)
# unless the caller gave -Z itself (then its arguments are passed on as they are).
for a in "$@"; do [ "$a" = "-Z" ] && exec /usr/sbin/slurmd "$@"; done
# ${SLURMD_OPTIONS} filled from /etc/slurmpod/slurmd.env arrives as one word: split it (and drop an empty one)
set -f
set -- $*
if [ -r /etc/slurmpod/slurmd.args ]; then
  old_ifs=$IFS; IFS='
'
  set -- "$@" $(cat /etc/slurmpod/slurmd.args)
  IFS=$old_ifs
fi
exec /usr/sbin/slurmd "$@"
"""


def uses_systemd(runner: CommandRunner) -> bool:
    """Whether the node runs systemd as PID 1: what its runner knows (``InitAware``), else whether
    ``/run/systemd/system`` exists in it (only then)."""
    known = runner.runs_systemd() if isinstance(runner, InitAware) else None
    if known is not None:
        return known
    return control._run(runner, ["test", "-d", SYSTEMD_RUN_DIR], timeout=10).returncode == 0


def systemctl(runner: CommandRunner, *args: str, timeout: float = 90.0, check: bool = True) -> str:
    r = control._run(runner, ["systemctl", *args], timeout=timeout)
    if check and r.returncode != 0:
        raise control.SlurmError(f"systemctl {' '.join(args)} failed: {(r.stderr or r.stdout).strip()[-400:]}",
                                 journal(runner, args[-1]) if args else "")
    return r.stdout


def active(runner: CommandRunner, unit: str) -> bool:
    return control._run(runner, ["systemctl", "is-active", "--quiet", unit], timeout=10).returncode == 0


def journal(runner: CommandRunner, unit: str, lines: int = control.LOG_TAIL_LINES) -> str:
    r = control._run(runner, ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"], timeout=15)
    return r.stdout if r.returncode == 0 else ""


#: the link ``systemctl enable`` makes for a ``WantedBy=multi-user.target`` unit $u in $w: to the unit in /etc if
#: there is one, else to the package's (shared by ``ENABLE`` and ``START``; exit 3 when it cannot be made)
_ENABLE_LINK = """f=/etc/systemd/system/$u.service
[ -e "$f" ] || f=/lib/systemd/system/$u.service
ln -sfn "$f" "$w" || exit 3"""
_WANTS_LINK = "w=/etc/systemd/system/multi-user.target.wants/$u.service"
ENABLE = f"u=$1\n{_WANTS_LINK}\n{_ENABLE_LINK}\n"


def enable(runner: CommandRunner, unit: str) -> None:
    """What ``systemctl enable`` does for a ``WantedBy=multi-user.target`` unit, without the daemon-reload it
    implies (measured: ~0.4-1 s per call in a node); one command (``ENABLE``)."""
    control._check(runner, ["sh", "-c", ENABLE, "sh", unit])


def disable(runner: CommandRunner, unit: str) -> None:
    """``enable``'s undo: the unit no longer starts when the node boots."""
    control._check(runner, ["rm", "-f", f"/etc/systemd/system/multi-user.target.wants/{unit}.service"])


#: ``start`` in one in-node command (it was four or five: is-active, reset-failed, test -e + ln, start; every
#: node's boot starts one to three units). $1 the unit; $2 ``enable`` (the unit's multi-user.target.wants link, as
#: ``enable`` makes it) or ``disable``; $3 ``restart``: an active unit is restarted. Exit 3: the link could not be
#: changed; 4: ``systemctl start`` failed; 5: ``systemctl restart`` failed (their messages on stderr).
START = f"""u=$1
{_WANTS_LINK}
if [ "$2" = disable ]; then rm -f "$w" || exit 3; fi
if systemctl is-active --quiet "$u"; then
  [ "$3" = restart ] || exit 0
  systemctl restart "$u" || exit 5
  exit 0
fi
systemctl reset-failed "$u" >/dev/null 2>&1
if [ "$2" = enable ]; then
{_ENABLE_LINK}
fi
systemctl start "$u" || exit 4
"""
_START_FAILED = {3: "changing {unit}'s multi-user.target.wants link", 4: "systemctl start {unit}",
                 5: "systemctl restart {unit}"}


def start(runner: CommandRunner, unit: str, autostart: bool = True, *, restart: bool = False) -> None:
    """Starts ``unit`` unless it is active (a failed one is reset first); enabled (it starts again when the node
    boots) or, ``autostart=False``, disabled. ``restart``: an active unit is restarted instead (not re-enabled)."""
    r = control._run(runner, ["sh", "-c", START, "sh", unit, "enable" if autostart else "disable",
                              "restart" if restart else "keep"], timeout=120)
    if r.returncode != 0:
        what = _START_FAILED.get(r.returncode, "starting {unit}").format(unit=unit)
        raise control.SlurmError(f"{what} failed: {(r.stderr or r.stdout).strip()[-400:]}", journal(runner, unit))


def stop(runner: CommandRunner, comm: str) -> bool:
    """Stops the unit of daemon ``comm`` (systemd waits for it to exit); False if it was not active."""
    unit = UNITS[comm]
    if not active(runner, unit):
        return False
    systemctl(runner, "stop", unit)
    return True


def start_munge(runner: CommandRunner, key: bytes) -> None:
    control.write_file(runner, control.MUNGE_KEY, key, 0o400, "munge")
    systemctl(runner, "reset-failed", "munge", check=False)
    enable(runner, "munge")
    systemctl(runner, "restart", "munge")


def slurmd_files(node_conf: str | None) -> list[NodeFile]:
    """The slurmd wrapper and (compute nodes) the node's dynamic-node arguments."""
    files = [NodeFile(SLURMD_WRAPPER, WRAPPER.encode(), 0o755)]
    if node_conf is not None:
        files.append(NodeFile(SLURMD_ARGS, f"-Z\n--conf\n{node_conf}\n".encode(), 0o644))
    return files


def keep_slurmd_template(runner: CommandRunner, *, compute: bool) -> None:
    """Keeps the image's slurmd.service (with the ``${SLURMD_OPTIONS}`` placeholder) as the template before any
    lifecycle script renders it; a node that is not a compute node has no dynamic-node arguments."""
    # a compute node's health agent: started at boot where its files were on the root volume then, else now
    agent = (f' && {{ test ! -e /etc/systemd/system/{HEALTH_UNIT} || systemctl is-active -q {HEALTH_UNIT} || '
             f'{{ systemctl daemon-reload && systemctl start {HEALTH_UNIT}; }}; }}' if compute else "")
    r = control._run(runner, ["sh", "-c", f'( grep -qF "$1" {SLURMD_UNIT} || exit 0; test -e {SLURMD_TEMPLATE} '
                              f'|| {{ mkdir -p /etc/slurmpod && cp -p {SLURMD_UNIT} {SLURMD_TEMPLATE}; }} ){agent}',
                              "sh", PLACEHOLDER], timeout=30)
    if r.returncode != 0:
        raise control.SlurmError(f"keeping the image's slurmd.service failed: {r.stderr.strip()[-300:]}")
    if not compute:
        control._run(runner, ["rm", "-f", SLURMD_ARGS], timeout=10)


def prepare_slurmd(runner: CommandRunner, node_conf: str | None) -> None:
    """Before any lifecycle script: keep the image's slurmd.service template, install the wrapper, and write the
    node's dynamic-node arguments (None: not a compute node; the wrapper then adds nothing)."""
    keep_slurmd_template(runner, compute=node_conf is not None)
    write_files(runner, slurmd_files(node_conf))


def slurmd_env(conf_servers: Sequence[str]) -> NodeFile:
    """``SLURMD_ENV`` for these conf servers: what ``start_slurmd`` writes (a compute node's baseline writes it
    with its other files when the controllers' addresses are known, so the start finds it current)."""
    return NodeFile(SLURMD_ENV, f"SLURMD_OPTIONS=--conf-server {','.join(conf_servers)}\n".encode(), 0o644)


def start_slurmd(runner: CommandRunner, conf_servers: Sequence[str], node_conf: str, *,
                 prepared: bool = False) -> bool:
    """Starts slurmd with ``--conf-server`` (as start_slurm.sh's envsubst would) and enables it; a running slurmd
    started with another conf-server list is restarted (job steps survive a slurmd restart).

    A unit that still has the ``${SLURMD_OPTIONS}`` placeholder and reads ``SLURMD_ENV`` (the node layer's) gets
    the options from that file: no unit rewrite, no daemon-reload (~0.2 s of every compute node's boot). A unit a
    lifecycle script rendered, or an image's without that file, is rendered from the template as before.
    ``prepared``: ``prepare_slurmd`` ran at the node's boot (its baseline), before any lifecycle script.
    True when systemd has confirmed slurmd ready (a ``Type=notify`` unit started): no need to look for it."""
    if not prepared:
        prepare_slurmd(runner, node_conf)
    options = f"--conf-server {','.join(conf_servers)}"
    # the unit and its env file in one command (NUL between them: neither file holds one)
    both = control._run(runner, ["sh", "-c", 'cat "$1"; printf "\\0"; cat "$2" 2>/dev/null', "sh", SLURMD_UNIT,
                                 SLURMD_ENV], timeout=10).stdout
    live, _, env_now = both.partition("\0")
    if PLACEHOLDER in live and f"EnvironmentFile=-{SLURMD_ENV}" in live:
        env = slurmd_env(conf_servers)
        changed = env_now.encode() != env.content
        if changed:
            control.write_file(runner, SLURMD_ENV, env.content, 0o644)
        # a running slurmd with other options is restarted; one started before the file was current (by a
        # lifecycle script, or by systemd at a reboot) runs on the same options: left alone
        start(runner, "slurmd", restart=changed)
        return _notify(live)
    template = control._run(runner, ["cat", SLURMD_TEMPLATE], timeout=10)
    if template.returncode == 0 and PLACEHOLDER in template.stdout:
        unit = template.stdout.replace(PLACEHOLDER, options)
    else:  # no template (an image without the placeholder): a unit of our own
        unit = ("[Unit]\nDescription=Slurm node daemon\nAfter=munge.service network-online.target\n"
                f"[Service]\nExecStart={SLURMD_WRAPPER} -D -s {options}\nRestart=on-failure\nKillMode=process\n"
                "LimitNOFILE=131072\nLimitMEMLOCK=infinity\nLimitSTACK=infinity\nDelegate=yes\n"
                "[Install]\nWantedBy=multi-user.target\n")
    if live != unit:
        control.write_file(runner, SLURMD_UNIT, unit.encode(), 0o644)
        systemctl(runner, "daemon-reload")
        if active(runner, "slurmd"):
            systemctl(runner, "restart", "slurmd")
    start(runner, "slurmd")
    return _notify(unit)


def _notify(unit: str) -> bool:
    """A ``Type=notify`` unit is active only once the daemon said it is ready."""
    return any(line.replace(" ", "").strip() == "Type=notify" for line in unit.splitlines())


def node_conf(cpus: int, real_memory: int, feature: str, gres: str | None = None) -> str:
    text = f"CPUs={cpus} RealMemory={real_memory} Feature={feature}"
    return f"{text} Gres={gres}" if gres else text
