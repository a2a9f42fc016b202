"""Test-only throwaway "instances": netns + UTS/IPC/mount/PID namespaces, linked by a bridge that
lives in its own "switch" netns (nothing is added to the host's network namespace).

``NsCluster`` hands out ``NsRunner`` objects implementing ``CommandRunner`` via
``nsenter -t <init> -n -u -i -m -p``. ``close()`` kills every node (SIGKILL of the PID-namespace init
kills all its processes) and deletes the namespaces; use it in a ``finally``/fixture finalizer.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurmpod.providers.base import CommandResult, TemporaryProviderError

INIT = Path(__file__).with_name("ns_init.py")
SUBNET = "10.239.77"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, timeout=10, capture_output=True)


@dataclass
class NsRunner:
    """CommandRunner into one test node."""

    pid: int

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return ["nsenter", "-t", str(self.pid), "-n", "-u", "-i", "-m", "-p", "--", *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        full_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        full_env.update(env or {})
        try:
            p = subprocess.run(
                self._argv(argv),
                input=input if input is not None else b"",
                capture_output=True,
                timeout=timeout,
                env=full_env,
                cwd=cwd,
            )
        except subprocess.TimeoutExpired as e:
            raise TemporaryProviderError(f"timeout after {timeout}s: {argv}") from e
        return CommandResult(
            p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        )

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return self._argv(argv)


@dataclass
class NsNode:
    name: str
    ip: str
    netns: str
    popen: subprocess.Popen[bytes]
    init_pid: int
    runner: NsRunner


@dataclass
class NsCluster:
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    nodes: dict[str, NsNode] = field(default_factory=dict)
    _next: int = 10
    _dir: Path | None = None
    _switch_up: bool = False

    @property
    def switch(self) -> str:
        return f"spt-{self.tag}-sw"

    def _setup(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="slurmpod-nstest-"))
            (self._dir / "hosts").write_text("127.0.0.1 localhost\n")
            (self._dir / "resolv.conf").write_text("# no nameserver\n")
            _ip("netns", "add", self.switch)
            self._switch_up = True
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        return self._dir

    def add_node(self, name: str) -> NsNode:
        d = self._setup()
        ip = f"{SUBNET}.{self._next}"
        idx = self._next
        self._next += 1
        netns = f"spt-{self.tag}-{idx}"
        with open(d / "hosts", "a") as f:  # in place: the bind mount keeps the inode
            f.write(f"{ip} {name}\n")
        _ip("netns", "add", netns)
        veth = f"spt{self.tag}{idx}"[:15]
        _ip("-n", self.switch, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("-n", self.switch, "link", "set", veth, "master", "br0", "up")
        _ip("-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        popen = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{netns}",
                "unshare",
                "--uts",
                "--ipc",
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "--propagation",
                "private",
                sys.executable,
                str(INIT),
                name,
                str(d / "hosts"),
                str(d / "resolv.conf"),
            ],
            start_new_session=True,
        )
        init_pid = self._wait_child(popen.pid)
        node = NsNode(name, ip, netns, popen, init_pid, NsRunner(init_pid))
        self.nodes[name] = node
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/proc/{init_pid}/root/run/node-ready"):
            if time.monotonic() > deadline or popen.poll() is not None:
                raise RuntimeError(f"test node {name} did not come up")
            time.sleep(0.02)
        return node

    @staticmethod
    def _wait_child(pid: int) -> int:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except FileNotFoundError:
                children = []
            if children:
                return int(children[0])
            time.sleep(0.01)
        raise RuntimeError("unshare did not fork its init")

    def kill_node(self, name: str) -> None:
        node = self.nodes.pop(name, None)
        if node is None:
            return
        try:
            os.kill(node.init_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            node.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            node.popen.kill()
            node.popen.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", node.netns], timeout=10, capture_output=True)

    def close(self) -> None:
        for name in list(self.nodes):
            self.kill_node(name)
        if self._switch_up:
            subprocess.run(["ip", "netns", "del", self.switch], timeout=10, capture_output=True)
            self._switch_up = False
        if self._dir is not None:
            for f in self._dir.iterdir():
                f.unlink()
            self._dir.rmdir()
            self._dir = None
