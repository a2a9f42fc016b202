"""PID 1 of a throwaway test node (runs inside ``unshare --uts --ipc --mount --pid --mount-proc``).

argv: HOSTNAME HOSTS_FILE RESOLV_FILE. Sets the hostname, hides the host's Slurm/munge state behind
private tmpfs mounts, binds the cluster hosts file and an empty resolv.conf, writes /run/node-ready,
then reaps orphans forever. Test-only; the real provider lives in ``slurmpod.providers.local``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

PRIVATE_DIRS = (
    "/etc/slurm",
    "/etc/munge",
    "/var/log/slurm",
    "/var/log/munge",
    "/var/lib/munge",
    "/var/lib/slurm",
    "/var/spool",
    "/run",
    "/opt",
    "/dev/shm",
)


def main() -> None:
    hostname, hosts_file, resolv_file = sys.argv[1:4]
    socket.sethostname(hostname)
    for d in PRIVATE_DIRS:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", d], check=True, timeout=10)
    subprocess.run(["mount", "--bind", hosts_file, "/etc/hosts"], check=True, timeout=10)
    subprocess.run(["mount", "--bind", resolv_file, "/etc/resolv.conf"], check=True, timeout=10)
    with open("/run/node-ready", "w") as f:
        f.write("ok\n")
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.2)


if __name__ == "__main__":
    main()
