"""``check_host``: can this machine run the local provider? One actionable line when not."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from slurmpod.providers.base import SetupError

APT_HINT = "apt-get install -y slurmctld slurmd slurm-client munge iproute2 util-linux"
REQUIRED_TOOLS = ("ip", "nsenter", "unshare", "setpriv", "munged", "mungekey", "munge", "unmunge",
                  "slurmctld", "slurmd", "scontrol")
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def _which(tool: str) -> str | None:
    path = os.environ.get("PATH", "") + ":" + ":".join(SBIN_DIRS)
    return shutil.which(tool, path=path)


def _fstype_of(path: Path) -> str | None:
    """Filesystem type of the mount holding ``path`` (longest mount-point prefix in mountinfo)."""
    target = str(path.resolve())
    best, fstype = "", None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        mnt = fields[4].replace("\\040", " ")
        inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best):
            best, fstype = mnt, right.split()[0]
    return fstype


def check_host(state_dir: Path | None = None, cidr: str | None = None) -> None:
    """Raises ``SetupError`` (one line, saying what to do) unless the local provider can run here.

    With ``cidr``, also checks that the range does not overlap the host's routes (``--local-cidr``).
    """
    if os.geteuid() != 0:
        raise SetupError("the local provider needs root: run slurmpod as root (e.g. with sudo)")
    missing = [t for t in REQUIRED_TOOLS if _which(t) is None]
    if missing:
        raise SetupError(f"missing {', '.join(missing)}: {APT_HINT}")
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    if "overlay" not in filesystems.split():
        raise SetupError("the kernel has no overlayfs: run `modprobe overlay` (or use a kernel with it)")
    if state_dir is not None:
        probe = Path(state_dir)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if _fstype_of(probe) == "overlay":
            raise SetupError(
                f"state dir {state_dir} is on overlayfs, which cannot hold root volumes: "
                "pass --state-dir on ext4, xfs or tmpfs (e.g. a bind-mounted volume)"
            )
    if cidr is not None:
        from slurmpod.providers.local.netns import choose_subnet, host_routes

        choose_subnet(cidr, "check", set(), host_routes())
