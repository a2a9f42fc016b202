"""The slurmpod node layer: what every image gets on top of Debian's packages, at build (or import) time.

* Boot hygiene: units a node does not need are masked; the Slurm daemons, slurmdbd and MariaDB are not enabled
  (the node's boot enables the one its role needs); Docker and podman's API start on first use (their sockets),
  not at boot, and so do sshd (``ssh.socket``, where the suite's sshd takes the socket: trixie on), D-Bus and
  systemd-logind (bus activation: the first ``su -``, ssh login or ``loginctl`` starts them); the build-time
  munge key, ssh host keys and machine-id are removed (per node, not per image); sshd makes one ed25519 host key
  at first start; journald is volatile (16M); ``/etc/.updated`` and ``/var/.updated`` say the image is up to date
  (no ConditionNeedsUpdate work at boot).
* HyperPod's node contract: Slurm under ``/opt/slurm`` (``bin/``, ``sbin/`` linking Debian's binaries,
  ``etc/`` a real directory that ``/etc/slurm`` points to), ``/etc/systemd/system/slurmd.service`` with the
  literal ``${SLURMD_OPTIONS}`` placeholder AWS's ``start_slurm.sh`` renders with envsubst, ``slurmctld.service``
  reading ``/opt/slurm/etc/slurm.conf`` (both Restart=on-failure, the stock unit's Type kept), user ``ubuntu``
  (uid/gid 1000, bash, passwordless sudo), ``/opt/sagemaker_cluster``, ``/opt/ml/config``, ``/var/log/provision``.
* The accounting host's database: a copy of Debian's initialised MariaDB datadir with slurmdbd's tables already
  made (``acctschema.prepare_schema``), which an empty database volume is seeded from.
* slurmpod's SPANK plugins (``SPANK_PLUGINS``: ``srun --auto-resume``, ``slurmpod/node/spank_auto_resume.c``;
  Pyxis's ``--container-*`` options, ``spank_containers.c``) compiled with the build host's C compiler against the
  image's own ``<slurm/spank.h>`` (a plugin must match the Slurm that loads it) into ``/usr/lib/slurmpod/``; an
  image without Slurm's headers gets none (plugstack.conf lists them as ``optional``). The plugins' Python sides
  are boot files, like the node's other programs.

Units are rendered from the image's own stock units, so User/PIDFile/limits follow the suite's Slurm.
Bump ``RECIPE_VERSION`` whenever the layer or the base package list changes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

from slurmpod.domain.slurm_release import SlurmRelease, major_of
from slurmpod.lifecycle.acctschema import MARIADBD_RUN_DIR, prepare_schema
from slurmpod.lifecycle.rootfs import RootfsError, dpkg_versions, resolve_in_root
from slurmpod.slurm.accounting import MARIADB_TEMPLATE, MYSQL_DATADIR
from slurmpod.slurm.units import PLACEHOLDER, SLURMD_ENV

RECIPE_VERSION = 13

MASKED = (
    "getty@tty1.service", "console-getty.service", "systemd-firstboot.service",
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "fstrim.timer", "e2scrub_all.timer",
    "e2scrub_reap.service", "systemd-pstore.service", "remote-fs.target",
    "systemd-networkd-wait-online.service", "systemd-timesyncd.service",
    "sys-kernel-debug.mount", "sys-kernel-tracing.mount", "sys-kernel-config.mount", "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount", "dev-mqueue.mount", "systemd-modules-load.service",
    # (recipe 8) work every boot did for nothing: the root volume is mounted read-write by the provider (no fstab),
    # the journal is volatile (nothing to flush), /run/lock is a tmpfiles.d directory of /run, and podman's DHCP
    # proxy (netavark, trixie) serves macvlan networks nodes do not have
    "systemd-remount-fs.service", "systemd-journal-flush.service", "run-lock.mount",
    "netavark-dhcp-proxy.service", "netavark-dhcp-proxy.socket",
    # (recipe 10) units whose conditions always fail in a node (no TPM, firmware, hibernation, binfmt_misc or system
    # extension images in a container), loaded and checked at every boot for nothing; and the static /dev nodes of
    # the running kernel's modules (the provider makes a node's /dev; it has no modules.devname of that kernel)
    "systemd-tmpfiles-setup-dev-early.service", "systemd-tmpfiles-setup-dev.service", "kmod-static-nodes.service",
    "systemd-tpm2-setup-early.service", "systemd-tpm2-setup.service", "systemd-pcrmachine.service",
    "systemd-pcrphase-initrd.service", "systemd-pcrphase-sysinit.service", "systemd-pcrphase.service",
    "systemd-pcrextend.socket", "systemd-pcrlock.socket", "systemd-hibernate-clear.service",
    "systemd-hibernate-resume.service", "systemd-battery-check.service", "systemd-bsod.service",
    "systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount", "proc-sys-fs-binfmt_misc.mount",
    "systemd-sysext.service", "systemd-confext.service", "systemd-machine-id-commit.service",
)
#: (recipe 10) systemd's generators that can find nothing in a node: no partition table, TPM, hibernation image,
#: VSOCK or kernel command line of its own, and no console to put a getty on. Each ran at every boot (and every
#: ``daemon-reload``) in PID 1's cgroup, 5-9 ms apiece. The fstab, rc-local and sysv generators stay (users' scripts
#: may use /etc/fstab, rc.local or an init script), as does podman's (Quadlet).
GENERATORS_OFF = (
    "systemd-gpt-auto-generator", "systemd-hibernate-resume-generator", "systemd-tpm2-generator",
    "systemd-ssh-generator", "systemd-system-update-generator", "systemd-debug-generator",
    "systemd-getty-generator", "systemd-run-generator", "systemd-bless-boot-generator",
    "systemd-cryptsetup-generator", "systemd-veritysetup-generator", "systemd-integritysetup-generator",
    "systemd-factory-reset-generator", "systemd-import-generator", "systemd-credential-generator",
)
UNWANTED_LINKS = (
    "getty.target.wants/getty@tty1.service", "sysinit.target.wants/systemd-pstore.service",
    "timers.target.wants/apt-daily.timer", "timers.target.wants/apt-daily-upgrade.timer",
    "timers.target.wants/dpkg-db-backup.timer", "timers.target.wants/fstrim.timer",
    "timers.target.wants/e2scrub_all.timer", "multi-user.target.wants/remote-fs.target",
    # per role: the node's boot enables the one it needs
    "multi-user.target.wants/slurmd.service", "multi-user.target.wants/slurmctld.service",
    "multi-user.target.wants/slurmdbd.service", "multi-user.target.wants/mariadb.service",
    # containers: Docker starts on first use (docker.socket, which pulls containerd); podman's API service
    # likewise (podman.socket); no podman auto-update or restart-policy runs at boot
    "multi-user.target.wants/docker.service", "multi-user.target.wants/containerd.service",
    "default.target.wants/podman.service", "default.target.wants/podman-auto-update.service",
    "default.target.wants/podman-restart.service", "timers.target.wants/podman-auto-update.timer",
)
#: (recipe 12) Debian's own links (in /usr/lib, which /etc cannot override without masking) that start D-Bus and
#: logind at every boot. Both stay available: dbus.socket listens from sockets.target and the system bus starts
#: logind when a client asks for org.freedesktop.login1 (pam_systemd at a login, loginctl). ~60 ms of CPU per boot.
VENDOR_WANTS_OFF = ("multi-user.target.wants/dbus.service", "multi-user.target.wants/systemd-logind.service")
SLURM_CLIENTS = ("sinfo", "squeue", "srun", "sbatch", "salloc", "scontrol", "scancel", "sacct", "sacctmgr",
                 "sstat", "sshare", "sprio", "sreport", "sattach", "sbcast", "sdiag")
SLURM_DAEMONS = ("slurmd", "slurmctld", "slurmdbd")
SLURM_CONF = "/opt/slurm/etc/slurm.conf"
UBUNTU_UID = 1000
SUDOERS = "ubuntu ALL=(ALL) NOPASSWD:ALL\n"
_KEY = "/etc/ssh/ssh_host_ed25519_key"
SSH_DROPIN = (
    "# slurmpod: host keys are per root volume, made at first start (ed25519 only: RSA costs ~1 s of a boot);\n"
    "# no separate `sshd -t` (sshd -D checks its configuration itself)\n"
    "[Service]\nExecStartPre=\n"
    f"ExecStartPre=/bin/sh -c 'test -e {_KEY} || exec ssh-keygen -q -t ed25519 -N \"\" -f {_KEY}'\n"
)
JOURNALD = "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n"
#: the accounting host's MariaDB: mariadbd itself (no galera_recovery before it, no debian-start table checks after
#: it: seconds of a boot), restarted when it dies, settings Slurm's accounting documentation recommends
MARIADB_DROPIN = ("# slurmpod: the accounting host's database\n[Service]\nExecStart=\n"
                  "ExecStart=/usr/sbin/mariadbd $MYSQLD_OPTS\nExecStartPost=\nRestart=on-failure\nRestartSec=2\n")
#: MariaDB sized for one cluster's accounting database on loopback: no TLS (MariaDB >= 11.4 makes itself a
#: certificate and loads the CA bundle at every start, ~0.3 s of a 0.45 s start; only local clients connect), no
#: buffer-pool dump/load (a fresh database has nothing worth warming), a 1 MiB temporary tablespace instead of 12 MiB
#: written out at each start
MARIADB_CNF = ("# slurmpod: Slurm accounting (slurmdbd) settings\n[mysqld]\nskip-name-resolve\nbind-address=127.0.0.1\n"
               "innodb_buffer_pool_size=128M\ninnodb_lock_wait_timeout=900\nskip-ssl\n"
               "innodb_buffer_pool_load_at_startup=OFF\ninnodb_buffer_pool_dump_at_shutdown=OFF\n"
               "innodb_temp_data_file_path=ibtmp1:1M:autoextend\n"
               # (recipe 11) the accounting host's database volume is mounted here; MariaDB >= 11.8.6 of Debian
               # (sid) defaults to /var/lib/mariadb, which is on the root volume a software update replaces
               f"datadir={MYSQL_DATADIR}\n")
MARIADB_CNF_CLIENT = ("# MariaDB >= 11.4's clients insist on TLS unless told the server has none\n"
                      "[client-mariadb]\nskip-ssl\n")
#: slurmdbd after 24.11 (26.05 tried) checks that MariaDB's innodb_snapshot_isolation (ON since MariaDB 11.6) is off:
#: "not supported by Slurm and will cause slurmdbd to fatal when a write conflicts with a concurrent transaction"
MARIADB_CNF_NO_SNAPSHOT = "innodb_snapshot_isolation=OFF\n"
LAST_SLURM_WITH_SNAPSHOTS = SlurmRelease(24, 11)
#: MariaDB 11.8 (Debian sid) moved its socket from /run/mysqld to /run/mariadbd (server and libmariadb alike, so
#: slurmdbd follows it): slurmpod's own client (``slurm.accounting.MYSQL_SOCKET``) reaches it through a link
MYSQLD_SOCKET_LINK = ("# slurmpod: the accounting host's MariaDB socket at its classic path too\n"
                      "d /run/mysqld 0755 mysql root -\nL /run/mysqld/mysqld.sock - - - - /run/mariadbd/mysqld.sock\n")
MUNGE_DROPIN = "# slurmpod: munged comes back when it dies (the stock unit only restarts on abort)\n" \
               "[Service]\nRestart=on-failure\nRestartSec=1\n"
HOSTS = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"

# minimal units for an imported image without Debian's (same shape as bookworm's)
FALLBACK_UNIT = """\
[Unit]
Description=Slurm {what}
After=munge.service network-online.target remote-fs.target
Wants=network-online.target

[Service]
Type=simple
ExecStart=/usr/sbin/{daemon} -D -s
ExecReload=/bin/kill -HUP $MAINPID
PIDFile=/run/{daemon}.pid
KillMode=process
LimitNOFILE=131072
LimitMEMLOCK=infinity
LimitSTACK=infinity
TasksMax=infinity

[Install]
WantedBy=multi-user.target
"""

Chroot = Callable[[Sequence[str]], str]  # runs argv inside the image (chroot), returns stdout, raises on failure


class LayerError(RootfsError):
    """The node layer could not be applied; the message names the step."""


def notify_mode(stock: str) -> bool:
    """Does the stock unit run the daemon with ``--systemd`` (Type=notify; Slurm >= 23.11, e.g. trixie)?"""
    return any(line.strip().startswith("ExecStart=") and "--systemd" in line for line in stock.splitlines())


def render_unit(stock: str, *, daemon: str, args: str, condition: str | None, keep_env: bool,
                envsubst_safe: bool = False, env_file: str | None = None) -> str:
    """A full unit for ``daemon`` made from the suite's stock unit: ExecStart on ``/opt/slurm/sbin`` with ``args``
    (after the stock mode flags: ``--systemd`` or ``-D -s``), the stock ConditionPathExists replaced by
    ``condition``, Restart=on-failure, everything else (Type, User, PIDFile, limits, Install) kept.

    ``envsubst_safe``: no ``$`` but those of ``args`` (AWS's start_slurm.sh renders slurmd.service with a plain
    ``envsubst``, which would blank the stock ``ExecReload=/bin/kill -HUP $MAINPID``): that line is left out.
    ``env_file``: an optional ``EnvironmentFile=-`` before ExecStart (systemd fills ``args``' variables from it)."""
    mode = "--systemd" if notify_mode(stock) else "-D -s"
    exec_line = f"ExecStart=/opt/slurm/sbin/{daemon} {mode}{(' ' + args) if args else ''}"
    out = [f"# slurmpod node image: HyperPod's layout (/opt/slurm), made from Debian's {daemon}.service"]
    section = ""
    for raw in stock.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            if section == "[Unit]" and condition:
                _insert_before_blank(out, f"ConditionPathExists={condition}")
            section = line
        elif section == "[Unit]" and line.startswith("ConditionPathExists="):
            continue
        elif section == "[Service]":
            if line.startswith("ExecStart="):
                if env_file:
                    out.append(f"EnvironmentFile=-{env_file}")
                out.append(exec_line)
                out.append("Restart=on-failure")
                out.append("RestartSec=2")
                continue
            if line.startswith(("Restart=", "RestartSec=")):
                continue
            if line.startswith("EnvironmentFile=") and not keep_env:
                continue
            if envsubst_safe and "$" in line:
                continue
        out.append(raw.rstrip())
    if section == "[Unit]" and condition:
        out.append(f"ConditionPathExists={condition}")
    text = "\n".join(out).rstrip("\n") + "\n"
    if exec_line not in text:
        raise LayerError(f"the stock {daemon}.service has no ExecStart line")
    return text


def _insert_before_blank(out: list[str], line: str) -> None:
    i = len(out)
    while i > 0 and not out[i - 1].strip():
        i -= 1
    out.insert(i, line)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(text)
    path.chmod(mode)


def _stock_unit(root: Path, daemon: str) -> str:
    for d in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        found = resolve_in_root(root, f"{d}/{daemon}.service")
        if found is not None and found.is_file():
            return found.read_text()
    return FALLBACK_UNIT.format(daemon=daemon, what=daemon)


def _sbin(root: Path, name: str) -> str | None:
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        found = resolve_in_root(root, f"{d}/{name}")
        if found is not None and found.is_file():
            return f"{d}/{name}"
    return None


def mask_units(root: Path) -> None:
    units = root / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    for unit in MASKED:
        link = units / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")
    for rel in UNWANTED_LINKS:
        (units / rel).unlink(missing_ok=True)
    # a generator is turned off by a link to /dev/null of its name in /etc (systemd.generator(7)); those this suite
    # does not ship get none
    generators = root / "etc/systemd/system-generators"
    for name in GENERATORS_OFF:
        shipped = any((found := resolve_in_root(root, f"{d}/{name}")) is not None and os.path.lexists(found)
                      for d in ("/usr/lib/systemd/system-generators", "/lib/systemd/system-generators"))
        link = generators / name
        if link.is_symlink() or link.exists():
            link.unlink()
        if shipped:
            generators.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/dev/null")


def on_demand(root: Path) -> None:
    """(recipe 12) D-Bus and logind start when first used (``VENDOR_WANTS_OFF``); sshd likewise, through
    ``ssh.socket``, where the image's socket unit hands sshd its listening socket (``Accept=no``: trixie's OpenSSH);
    an ``Accept=yes`` socket (bookworm) would run a per-connection ``sshd -i`` without the host key the service
    makes at first start, so there ssh.service stays enabled."""
    for rel in VENDOR_WANTS_OFF:
        wants, name = rel.split("/")
        found = resolve_in_root(root, f"/usr/lib/systemd/system/{wants}")
        if found is not None and (found / name).is_symlink():
            (found / name).unlink()
    socket = resolve_in_root(root, "/usr/lib/systemd/system/ssh.socket")
    units = root / "etc/systemd/system"
    if socket is None or not socket.is_file() or "Accept=no" not in socket.read_text().replace(" ", ""):
        return
    (units / "multi-user.target.wants/ssh.service").unlink(missing_ok=True)
    link = units / "sockets.target.wants/ssh.socket"
    if not os.path.lexists(link):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("/usr/lib/systemd/system/ssh.socket")


def slurm_prefix(root: Path) -> None:
    """``/opt/slurm/{bin,sbin}`` -> Debian's binaries; ``/opt/slurm/etc`` real, ``/etc/slurm`` -> it."""
    opt = root / "opt/slurm"
    for sub in ("bin", "sbin", "etc"):
        (opt / sub).mkdir(parents=True, exist_ok=True)
    for names, sub in ((SLURM_CLIENTS, "bin"), (SLURM_DAEMONS, "sbin")):
        for name in names:
            target = _sbin(root, name)
            link = opt / sub / name
            if link.is_symlink():
                link.unlink()
            if target is not None:
                link.symlink_to(target)
    etc_slurm = root / "etc/slurm"
    if etc_slurm.is_symlink():
        etc_slurm.unlink()
    elif etc_slurm.is_dir():
        for entry in sorted(etc_slurm.iterdir()):
            dest = opt / "etc" / entry.name
            if not os.path.lexists(dest):
                shutil.move(str(entry), dest)
        shutil.rmtree(etc_slurm)
    etc_slurm.symlink_to("/opt/slurm/etc")
    (root / "var/log/slurm").mkdir(parents=True, exist_ok=True)


def slurm_units(root: Path) -> None:
    units = root / "etc/systemd/system"
    _write(units / "slurmd.service", render_unit(_stock_unit(root, "slurmd"), daemon="slurmd",
                                                 args=PLACEHOLDER, condition=None, keep_env=False,
                                                 envsubst_safe=True, env_file=SLURMD_ENV))
    _write(units / "slurmctld.service", render_unit(
        _stock_unit(root, "slurmctld"), daemon="slurmctld", args=f"-f {SLURM_CONF} $SLURMCTLD_OPTIONS",
        condition=SLURM_CONF, keep_env=True))
    if _sbin(root, "slurmdbd"):
        _write(units / "slurmdbd.service", render_unit(
            _stock_unit(root, "slurmdbd"), daemon="slurmdbd", args="$SLURMDBD_OPTIONS",
            condition="/opt/slurm/etc/slurmdbd.conf", keep_env=True))
    if _sbin(root, "mariadbd") and (root / "etc/mysql/mariadb.conf.d").is_dir():
        _write(units / "mariadb.service.d/slurmpod.conf", MARIADB_DROPIN)
        slurmdbd = major_of(dpkg_versions(root, ("slurmdbd",)).get("slurmdbd", ""))
        no_snapshots = slurmdbd is not None and slurmdbd > LAST_SLURM_WITH_SNAPSHOTS
        _write(root / "etc/mysql/mariadb.conf.d/60-slurmpod.cnf",
               MARIADB_CNF + (MARIADB_CNF_NO_SNAPSHOT if no_snapshots else "") + MARIADB_CNF_CLIENT)
        tmpfiles = root / "usr/lib/tmpfiles.d/mariadb.conf"
        if tmpfiles.is_file() and f"d {MARIADBD_RUN_DIR} " in tmpfiles.read_text():
            _write(root / "etc/tmpfiles.d/slurmpod-mysqld.conf", MYSQLD_SOCKET_LINK)
        mariadb_template(root)
        prepare_schema(root)  # slurmdbd's tables in the template: once per image, not per cluster
    _write(units / "munge.service.d/slurmpod.conf", MUNGE_DROPIN)
    _write(units / "ssh.service.d/slurmpod.conf", SSH_DROPIN)


def mariadb_template(root: Path) -> None:
    """``MARIADB_TEMPLATE``: a sparse copy of the datadir Debian's postinst initialised (``/var/lib/mysql``;
    ``/var/lib/mariadb`` from MariaDB 11.8.6 of sid on). An empty accounting database volume is seeded from it
    (~50 ms) instead of running mariadb-install-db (0.6-1 s)."""
    template = root / MARIADB_TEMPLATE.lstrip("/")
    datadir = next((root / d for d in ("var/lib/mysql", "var/lib/mariadb") if (root / d / "mysql").is_dir()), None)
    if datadir is None or template.exists():
        return
    template.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["cp", "-a", "--sparse=always", f"{datadir}/.", str(template)],  # noqa: S603, S607
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise LayerError(f"copying the MariaDB datadir template failed: {r.stderr.strip()[-300:]}")


def per_node_files(root: Path) -> None:
    """Nothing that must differ between nodes (or betray the build host) stays in the image."""
    (root / "etc/munge/munge.key").unlink(missing_ok=True)
    ssh = root / "etc/ssh"
    if ssh.is_dir():
        for key in ssh.glob("ssh_host_*_key*"):
            key.unlink()
    _write(root / "etc/machine-id", "", 0o444)
    _write(root / "etc/hostname", "localhost\n")
    _write(root / "etc/hosts", HOSTS)
    resolv = root / "etc/resolv.conf"
    if not resolv.is_symlink():
        _write(resolv, "")
    _write(root / "etc/systemd/journald.conf.d/slurmpod.conf", JOURNALD)
    for cache in (root / "var/cache/apt").glob("*.bin"):
        cache.unlink()


def contract_dirs(root: Path) -> None:
    for rel in ("opt/sagemaker_cluster", "opt/ml/config", "var/log/provision", "etc/slurmpod"):
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel).chmod(0o755)


def ubuntu_user(root: Path, chroot: Chroot) -> None:
    """``ubuntu`` uid/gid 1000, bash, in groups sudo and docker (when the image has them), passwordless sudo
    (validated by the image's visudo)."""
    passwd = (root / "etc/passwd").read_text()
    entry = next((line.split(":") for line in passwd.splitlines() if line.startswith("ubuntu:")), None)
    if entry is not None and entry[2] != str(UBUNTU_UID):
        raise LayerError(f"the image has user ubuntu with uid {entry[2]}, not {UBUNTU_UID}")
    if entry is None:
        taken = next((line.split(":")[0] for line in passwd.splitlines()
                      if line.count(":") >= 3 and line.split(":")[2] == str(UBUNTU_UID)), None)
        if taken:
            raise LayerError(f"uid {UBUNTU_UID} is taken by user {taken} in the image; user ubuntu needs it")
        groups = (root / "etc/group").read_text()
        if not any(line.startswith("ubuntu:") for line in groups.splitlines()):
            chroot(["groupadd", "-g", str(UBUNTU_UID), "ubuntu"])
        extra = ["-G", "sudo"] if any(line.startswith("sudo:") for line in groups.splitlines()) else []
        chroot(["useradd", "-m", "-u", str(UBUNTU_UID), "-g", "ubuntu", *extra, "-s", "/bin/bash",
                "-c", "Ubuntu", "ubuntu"])
    groups = (root / "etc/group").read_text()
    docker = next((line for line in groups.splitlines() if line.startswith("docker:")), None)
    if docker is not None and "ubuntu" not in docker.rsplit(":", 1)[-1].split(","):
        chroot(["usermod", "-aG", "docker", "ubuntu"])  # HyperPod's: ubuntu runs docker without sudo
    sudoers = root / "etc/sudoers.d/90-ubuntu"
    _write(sudoers, SUDOERS, 0o440)
    chroot(["visudo", "-c", "-q", "-f", "/etc/sudoers.d/90-ubuntu"])


#: slurmpod's SPANK plugins: source in slurmpod/node -> the plugin in the image (plugstack.conf lists them)
SPANK_PLUGINS = {
    "spank_auto_resume.c": "/usr/lib/slurmpod/spank_auto_resume.so",  # srun --auto-resume
    "spank_containers.c": "/usr/lib/slurmpod/spank_containers.so",  # srun/sbatch --container-image (Pyxis's)
}
SPANK_PLUGIN = SPANK_PLUGINS["spank_auto_resume.c"]
CC_TIMEOUT = 120.0


def spank_plugin(root: Path) -> bool:
    """Builds slurmpod's SPANK plugins into the image; False (and none) without the image's Slurm headers."""
    include = resolve_in_root(root, "/usr/include/slurm/spank.h")
    if include is None or not include.is_file():
        return False
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise LayerError("no C compiler on this host to build slurmpod's SPANK plugins (apt-get install gcc)")
    with tempfile.TemporaryDirectory(prefix="slurmpod-spank-") as inc:
        # only the image's slurm/ headers: the build host's own (if any, another Slurm) must not be seen
        Path(inc, "slurm").symlink_to(include.parent)
        for name, plugin in SPANK_PLUGINS.items():
            out = root / plugin.lstrip("/")
            out.parent.mkdir(parents=True, exist_ok=True)
            with resources.as_file(resources.files("slurmpod.node").joinpath(name)) as src:
                r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I", inc,  # noqa: S603
                                    "-o", str(out), str(src)], capture_output=True, text=True, timeout=CC_TIMEOUT)
            if r.returncode != 0:
                raise LayerError(f"building the SPANK plugin {name} failed: {r.stderr.strip()[-600:]}")
            out.chmod(0o755)
    return True


def mark_updated(root: Path) -> None:
    """``/etc/.updated`` and ``/var/.updated`` as systemd-update-done writes them: not older than ``/usr``."""
    usr = os.lstat(root / "usr")
    for d in ("etc", "var"):
        path = root / d / ".updated"
        _write(path, "# This file was created by slurmpod's node layer (as systemd-update-done would).\n"
                     f"TIMESTAMP_NSEC={usr.st_mtime_ns}\n")
        os.utime(path, ns=(usr.st_mtime_ns, usr.st_mtime_ns), follow_symlinks=False)


def apply_node_layer(root: Path, chroot: Chroot) -> None:
    """Applies the whole layer to the tree at ``root``; ``chroot`` runs the steps that need the image's tools."""
    mask_units(root)
    on_demand(root)
    slurm_prefix(root)
    slurm_units(root)
    per_node_files(root)
    contract_dirs(root)
    ubuntu_user(root, chroot)
    spank_plugin(root)
    mark_updated(root)  # last: nothing may touch /usr after it
