"""Fake "remote machines" for the ssh provider: each is a host made by the local provider (its own network
namespace and address on a test bridge, its own mount/PID/UTS namespaces and writable root over this
machine's root), running Debian's sshd on its own address with its own host key.

They are reachable from this machine's network namespace (the bridge carries the host's .1 address), so a
slurmpod server here connects to them like to real servers. ``stop`` removes every namespace, bridge,
mount and process (sshd and whatever the tests started inside die with the host's PID namespace).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from slurmpod.providers.base import CommandResult, InstanceRequest
from slurmpod.providers.local.provider import LocalProvider

SSHD = "/usr/sbin/sshd"
SSHD_CONFIG = """Port 22
ListenAddress {ip}
HostKey /etc/ssh/fakehost/ssh_host_ed25519_key
PidFile /run/sshd-fakehost.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile .ssh/authorized_keys
StrictModes no
PrintMotd no
LogLevel ERROR
"""


def sshd_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not Path(SSHD).exists():
        return "openssh-server not installed (apt-get install -y openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen not installed"
    return None


@dataclass
class FakeHost:
    instance_id: str
    ip: str
    hostname: str


class FakeHosts:
    """``n`` fake machines; ``key`` is a client key every host accepts for root."""

    def __init__(self, base: Path, cidr: str = "10.232.0.0/16") -> None:
        self.base = base
        self.state = base / "fakehosts"
        self.provider = LocalProvider(self.state, cidr=cidr)
        self.cluster = "fh" + uuid.uuid4().hex[:8]
        self.key = base / "client_ed25519"
        self.other_key = base / "other_ed25519"
        for k in (self.key, self.other_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True, timeout=30)
        self.hosts: list[FakeHost] = []

    def run(self, host: FakeHost, *argv: str, input: bytes | None = None, timeout: float = 30) -> CommandResult:
        """A command inside the fake machine (through its namespaces, not through ssh)."""
        return self.provider.runner(self.cluster, host.instance_id).run(list(argv), timeout=timeout, input=input)

    def add(self, *, authorized: Path | None = None, without: tuple[str, ...] = ()) -> FakeHost:
        """A new machine running sshd; ``authorized`` is the accepted client key, ``without`` binaries removed."""
        iid = f"host{len(self.hosts):02d}"
        inst = self.provider.launch(InstanceRequest(
            cluster_id=self.cluster, instance_id=iid, group="hosts", instance_type="fakehost", image_id="host",
            image_root="/"))
        h = FakeHost(iid, inst.ip, inst.hostname)
        self.hosts.append(h)
        # /etc/hosts: a plain file of the machine (the local provider bind-mounts a shared read-only one)
        script = f"""set -e
umount /etc/hosts 2>/dev/null || true
printf '127.0.0.1 localhost\\n{h.ip} {h.hostname}\\n' > /etc/hosts
mkdir -p /etc/ssh/fakehost /run/sshd /root/.ssh
chmod 700 /root/.ssh
rm -f /etc/ssh/fakehost/ssh_host_ed25519_key*
ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/fakehost/ssh_host_ed25519_key
cat > /etc/ssh/fakehost/sshd_config
for b in {' '.join(without)}; do rm -f "$(command -v $b)"; done
"""
        r = self.run(h, "bash", "-c", script, input=SSHD_CONFIG.format(ip=h.ip).encode())
        assert r.returncode == 0, r.stderr
        pub = (authorized or self.key).with_suffix(".pub").read_bytes()
        r = self.run(h, "bash", "-c", "cat > /root/.ssh/authorized_keys; chmod 600 /root/.ssh/authorized_keys",
                     input=pub)
        assert r.returncode == 0, r.stderr
        self.start_sshd(h)
        return h

    def start_sshd(self, h: FakeHost) -> None:
        r = self.run(h, SSHD, "-f", "/etc/ssh/fakehost/sshd_config", "-E", "/var/log/sshd-fakehost.log")
        assert r.returncode == 0, r.stderr

    def new_host_key(self, h: FakeHost) -> None:
        """The machine "was reinstalled": a new SSH host key, sshd restarted."""
        r = self.run(h, "bash", "-c", "kill $(cat /run/sshd-fakehost.pid); sleep 0.3; "
                     "rm -f /etc/ssh/fakehost/ssh_host_ed25519_key*; "
                     "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/fakehost/ssh_host_ed25519_key")
        assert r.returncode == 0, r.stderr
        self.start_sshd(h)

    def unused_ip(self) -> str:
        """An address on the hosts' subnet that no machine has (connections to it fail)."""
        base = self.hosts[0].ip.rsplit(".", 1)[0]
        return f"{base}.250"

    def stop(self) -> None:
        from slurmpod.providers.local.cleanup import cleanup, find_leftovers

        try:
            self.provider.teardown_cluster(self.cluster)
        finally:
            if find_leftovers(self.state):
                cleanup(self.state)
