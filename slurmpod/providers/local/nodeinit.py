"""PID 1 of a local node: builds the node's whole root filesystem, pivots into it, then reaps orphans.

Started by the provider (``holder.py``) as::

    nsenter --net=/run/netns/NS unshare --uts --ipc --mount --pid --fork --kill-child \
        --propagation private python3 -I nodeinit.py BOOT_JSON

so it already runs in the node's network namespace and in fresh UTS, IPC, mount and PID namespaces.
Standard library only (it is run by file path, not imported from the package) and raw
``mount(2)``/``pivot_root(2)``/``umount2(2)`` through ctypes, so the image needs no util-linux.

The boot file (JSON) holds: ``hostname``, ``lower`` (image root), ``upper``, ``work``, ``merged``
(assembly point), ``hosts`` (cluster hosts file), ``volumes`` ([[host_dir, node_path], ...]),
``hide`` (host paths covered by an empty tmpfs, e.g. the provider's state dir), ``devices`` ([[/dev/NAME,
major, minor], ...]: extra character devices in the node's /dev, e.g. emulated GPUs), ``files``
([[node_path, text, mode], ...] written into the root volume at every boot), ``seed`` (optional: a host
file of a new root volume's files, ``[[node_path, base64, mode, owner, link], ...]``, read and removed before
pivot_root, written inside after it) and ``token`` (written to ``/run/slurmpod-ready`` once the root is
assembled).

``init`` selects what PID 1 becomes:

* ``systemd`` (an image root filesystem): the image's systemd, as on a real host. The node also gets a
  read-only ``/proc/sys`` (``net.*`` stays writable: it is the node's own netns) and ``sysrq-trigger``, a
  cgroup2 mount of its own cgroup namespace on ``/sys/fs/cgroup`` (the launcher put it in a per-node cgroup
  before ``unshare --cgroup``, so systemd creates nothing in the host's hierarchies), a machine-id per root
  volume, and a bounding set without the capabilities a node never needs (module loading, raw I/O, the
  clock, reboot of the host, syslog, MAC policy).
* ``host`` (the legacy model, the host's own root as the image): a bash loop that reaps orphans.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import signal
import socket
import stat
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}

READY_FILE = "/run/slurmpod-ready"
SYSTEMD = ("/lib/systemd/systemd", "/usr/lib/systemd/systemd")
PR_CAPBSET_DROP = 24
#: capabilities a node never needs (numbers from linux/capability.h): sys_module, sys_rawio, sys_boot,
#: sys_time, mac_override, mac_admin, syslog, wake_alarm
DROPPED_CAPS = (16, 17, 22, 25, 32, 33, 34, 35)
#: systemd's libbpf features (RestrictFileSystems=, SocketBindAllow=/SocketBindDeny=, RestrictNetworkInterfaces=;
#: no unit of Debian's uses them) are off in nodes: PID 1 probes them at every start by loading and verifying their
#: programs, ~90 of a node's ~230 ms of PID 1 CPU. PID 1 alone gets this directory first in its library path (the
#: system manager starts services and generators with an environment of its own), its ``dlopen("libbpf.so.1")``
#: finds a file that is no library and fails, and systemd goes on as without libbpf. What needs no libbpf stays:
#: ``DeviceAllow=``, ``IPAddressDeny=``, Slurm's device constraints, and ``ip`` and other programs' own libbpf.
NO_LIBBPF_DIR = "/run/slurmpod/no-libbpf"
NO_LIBBPF_NOTE = ("slurmpod: not a library. systemd (PID 1 only) finds this file first, so its BPF-framework features "
                  "(RestrictFileSystems=, SocketBind*=, RestrictNetworkInterfaces=) are off in this node.\n")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src: str | None, target: str, fstype: str | None = None, flags: int = 0,
          data: str | None = None) -> None:
    """mount(2) without util-linux."""
    rc = _libc.mount(src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
                     flags, data.encode() if data else None)
    _check(rc, f"mount {fstype or 'bind'} {src} -> {target}")


def _ids(root: str) -> tuple[dict[str, int], dict[str, int]]:
    """User and group ids by name, read from the *image's* passwd and group files."""
    users: dict[str, int] = {}
    groups: dict[str, int] = {}
    for path, table in ((f"{root}/etc/passwd", users), (f"{root}/etc/group", groups)):
        try:
            with open(path) as fh:
                for line in fh:
                    parts = line.split(":")
                    if len(parts) > 2 and parts[2].isdigit():
                        table[parts[0]] = int(parts[2])
        except OSError:
            pass
    return users, groups


# (path, owner, mode): directories the Slurm/munge daemons expect in every node.
NODE_DIRS: tuple[tuple[str, str, int], ...] = (
    ("/etc/slurm", "root", 0o755),
    ("/etc/munge", "munge", 0o700),
    ("/var/lib/munge", "munge", 0o711),
    ("/var/log/munge", "munge", 0o700),
    ("/var/log/slurm", "slurm", 0o755),
    ("/var/spool/slurmd", "root", 0o755),
    ("/var/spool/slurmctld", "slurm", 0o755),
    ("/var/lib/slurm", "slurm", 0o755),
    ("/var/lib/slurm/slurmd", "slurm", 0o755),
    ("/var/lib/slurm/slurmctld", "slurm", 0o755),
)
RUN_DIRS: tuple[tuple[str, str, int], ...] = (
    ("/run/munge", "munge", 0o755),
    ("/run/slurm", "slurm", 0o755),
    ("/run/lock", "root", 0o1777),
)


def _ensure_dir(root: str, path: str, owner: str, mode: int, users: dict[str, int],
                groups: dict[str, int]) -> None:
    """Creates ``root+path`` if missing; fixes owner/mode only when wrong (avoids needless copy-up)."""
    full = root + path
    os.makedirs(full, exist_ok=True)
    uid = users.get(owner, 0)
    gid = groups.get(owner, uid if owner in users else 0)
    st = os.lstat(full)
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.chown(full, uid, gid)
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(full, mode)


def _replace_with_file(path: str, content: str | None) -> None:
    """Makes ``path`` a regular file (a symlink in the image is removed first)."""
    if os.path.islink(path):
        os.unlink(path)
    if content is None:
        if not os.path.exists(path):
            open(path, "w").close()
        return
    with open(path, "w") as fh:
        fh.write(content)


def build_root(cfg: dict) -> None:
    """Assembles the node's root under ``cfg['merged']`` and pivots into it."""
    r = cfg["merged"]
    socket.sethostname(cfg["hostname"])
    for conf in ("all", "default", "eth0", "lo"):  # IPv4 only (this is the node's netns)
        try:
            with open(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6", "w") as fh:
                fh.write("1")
        except OSError:
            pass
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates to the host; pivot_root needs it
    mount("overlay", r, "overlay", 0,
          f"lowerdir={cfg['lower']},upperdir={cfg['upper']},workdir={cfg['work']}")
    for d in ("proc", "sys", "dev", "run", "tmp"):
        os.makedirs(f"{r}/{d}", exist_ok=True)
    mount("proc", f"{r}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("sysfs", f"{r}/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("tmpfs", f"{r}/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m")
    old = os.umask(0)
    for dev, major, minor in (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
                              ("urandom", 1, 9), ("tty", 5, 0)):
        os.mknod(f"{r}/dev/{dev}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
    for path, major, minor in cfg.get("devices", []):  # emulated accelerators (/dev/nvidia0 ...)
        name = os.path.basename(path)
        if path != f"/dev/{name}" or not name or name.startswith("."):
            raise OSError(f"invalid device path {path!r}")
        os.mknod(f"{r}/dev/{name}", stat.S_IFCHR | 0o666, os.makedev(int(major), int(minor)))
    os.umask(old)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
                         ("ptmx", "pts/ptmx")):
        os.symlink(target, f"{r}/dev/{link}")
    for d in ("pts", "shm", "mqueue"):
        os.mkdir(f"{r}/dev/{d}")
    mount("devpts", f"{r}/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620,gid=5")
    mount("tmpfs", f"{r}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=256m")
    mount("mqueue", f"{r}/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("tmpfs", f"{r}/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m")
    mount("tmpfs", f"{r}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=512m")

    # The image may be the host's root: cover the provider's state (other nodes, other clusters).
    for path in cfg.get("hide", []):
        if os.path.isdir(r + path):
            mount("tmpfs", r + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0755,size=4k")

    systemd = cfg.get("init") == "systemd"
    for src, dst in cfg.get("volumes", []):
        target = _inside(r, dst, systemd)
        os.makedirs(target, exist_ok=True)
        mount(src, target, None, MS_BIND)

    hosts = _inside(r, "/etc/hosts", systemd)
    _replace_with_file(hosts, None)
    mount(cfg["hosts"], hosts, None, MS_BIND)
    mount(None, hosts, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    if systemd:
        _harden(r)

    seed = _take_seed(cfg)
    os.chdir(r)
    nr = SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(f"pivot_root: unsupported architecture {os.uname().machine}")
    _check(_libc.syscall(nr, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount2 old root")
    os.chdir("/")
    # From here on paths resolve inside the node: an image's absolute symlinks cannot reach the host.
    _per_boot(cfg, systemd)
    _write_seed(seed)


def _take_seed(cfg: dict) -> list:
    """The new root volume's files (``seed``: a host file the provider wrote for this boot), read and removed."""
    path = cfg.get("seed")
    if not path:
        return []
    with open(path) as fh:
        rows = json.load(fh)
    os.unlink(path)
    return rows


def _write_seed(rows: list) -> None:
    """Writes the seed's files (and symlinks) inside the node, owners resolved in the image's passwd/group."""
    if not rows:
        return
    users, groups = _ids("")
    for path, data, mode, owner, link in rows:
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{os.path.basename(path)}.slurmpod-seed"
        if link:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(link, tmp)
        else:
            user, _, group = owner.partition(":")
            uid = users.get(user, 0)
            gid = groups.get(group or user, 0)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(base64.b64decode(data))
            os.chown(tmp, uid, gid)
            os.chmod(tmp, mode)
        os.replace(tmp, path)


def _inside(r: str, path: str, strict: bool) -> str:
    """``r + path`` for a mount target; with ``strict`` (an image that is not the host's root) a target that
    resolves outside the node's root (an absolute symlink in the image) is refused."""
    target = r + path
    if strict:
        real = os.path.realpath(target)
        if real != r and not real.startswith(r + "/"):
            raise OSError(f"{path} in the image resolves outside it ({real}): refusing to mount there")
    return target


def _per_boot(cfg: dict, systemd: bool) -> None:
    """Identity and settings written into the root volume at every boot (after pivot_root)."""
    if systemd:
        _machine_id("")
    for path, text, mode in cfg.get("files", []):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _replace_with_file(path, text)
        os.chmod(path, mode)
    _replace_with_file("/etc/hostname", cfg["hostname"] + "\n")
    _replace_with_file("/etc/resolv.conf",
                       "# no nameserver: names come from /etc/hosts\noptions attempts:1 timeout:1\n")
    if systemd:
        return  # the image's packages and units own their directories
    users, groups = _ids("")
    for path, owner, mode in NODE_DIRS + RUN_DIRS:
        _ensure_dir("", path, owner, mode, users, groups)
    # AWS's sample lifecycle scripts expect slurm.conf under /opt/slurm/etc.
    if not os.path.lexists("/opt/slurm/etc"):
        os.makedirs("/opt/slurm", exist_ok=True)
        os.symlink("/etc/slurm", "/opt/slurm/etc")


def _harden(r: str) -> None:
    """What systemd-nspawn does too: global sysctls and sysrq read-only, the node's own cgroup2 tree."""
    mount(f"{r}/proc/sys", f"{r}/proc/sys", None, MS_BIND)
    mount(None, f"{r}/proc/sys", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("/proc/sys/net", f"{r}/proc/sys/net", None, MS_BIND)  # the node's netns: its own to tune
    trigger = f"{r}/proc/sysrq-trigger"
    if os.path.exists(trigger):
        mount(trigger, trigger, None, MS_BIND)
        mount(None, trigger, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    mount("cgroup2", f"{r}/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _machine_id(r: str) -> None:
    """One machine-id per root volume (it survives reboots and dies with the volume, as on a real host)."""
    path = f"{r}/etc/machine-id"
    try:
        with open(path) as fh:
            if len(fh.read().strip()) == 32:
                return
    except OSError:
        pass
    _replace_with_file(path, os.urandom(16).hex() + "\n")
    os.chmod(path, 0o444)


def exec_systemd() -> None:
    """Becomes the image's systemd (never returns) without the capabilities a node never needs."""
    for cap in DROPPED_CAPS:
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL for a cap this kernel lacks: nothing to drop
    with open("/etc/machine-id") as fh:
        machine_id = fh.read().strip()
    exe = next((p for p in SYSTEMD if os.access(p, os.X_OK)), None)
    if exe is None:
        raise OSError("the image has no systemd (/lib/systemd/systemd)")
    env = {"container": "slurmpod", "container_uuid": machine_id, "TERM": "dumb",
           "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        os.makedirs(NO_LIBBPF_DIR, mode=0o755, exist_ok=True)
        for soname in ("libbpf.so.1", "libbpf.so.0"):  # systemd >= 250 tries both; older images' only .so.0
            with open(f"{NO_LIBBPF_DIR}/{soname}", "w") as fh:
                fh.write(NO_LIBBPF_NOTE)
        env["LD_LIBRARY_PATH"] = NO_LIBBPF_DIR
    except OSError:  # a full /run: systemd probes its BPF features as on any host
        pass
    os.execve(exe, [exe, "--log-target=console", "--show-status=false", "--log-level=notice"], env)


BASH_REAPER = 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done'


def reap_forever() -> None:
    """PID 1 duty: reap re-parented daemons until SIGTERM/SIGINT (SIGKILL ends the node anyway)."""
    sigs = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        info = signal.sigtimedwait(sigs, 3600)
        if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
            sys.exit(0)


def main(argv: list[str]) -> int:
    with open(argv[1]) as fh:
        cfg = json.load(fh)
    try:
        build_root(cfg)
    except Exception as exc:  # noqa: BLE001 - reported to the provider through holder.log
        print(f"slurmpod nodeinit: {exc}", file=sys.stderr, flush=True)
        return 1
    with open(READY_FILE, "w") as fh:
        fh.write(cfg["token"])
    os.closerange(3, 1024)
    if cfg.get("init") == "systemd":
        try:
            exec_systemd()
        except OSError as exc:
            print(f"slurmpod nodeinit: {exc}", file=sys.stderr, flush=True)
            return 1
    if os.access("/bin/bash", os.X_OK):
        # A bash loop reaps as well as Python does (bash waits for any child) at ~1/20 of the memory.
        # The trailing args keep the boot file in our command line: that is how holders are found.
        os.execv("/bin/bash", ["bash", "-c", BASH_REAPER, "slurmpod-nodeinit", __file__, argv[1]])
    reap_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
