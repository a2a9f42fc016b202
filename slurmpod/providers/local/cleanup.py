"""Finding and removing everything the local provider created for one state dir.

Ownership is decided only by what marks a resource as this state dir's: records under
``<state_dir>/local``, the link alias ``slurmpod:<state_dir>`` on bridges/veths (and on ``eth0`` inside a
node's netns), and holder command lines naming a boot file under the state dir. Nothing else is touched.
``cleanup`` removes *all* of it, live clusters included: run it with the slurmpod server stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from slurmpod.providers.local.commands import host_run
from slurmpod.providers.local.holder import NODEINIT, proc_state
from slurmpod.providers.local.layout import NETNS_PREFIX, Layout, link_alias
from slurmpod.providers.local.state import InstanceRecord, read_json, write_json


@dataclass
class Leftovers:
    processes: list[int] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    def describe(self) -> list[str]:
        return ([f"process {pid} ({_cmdline(pid)[:120]})" for pid in self.processes]
                + [f"netns {n}" for n in self.netns] + [f"link {name}" for name in self.links]
                + [f"mount {m}" for m in self.mounts] + [f"dir {d}" for d in self.dirs])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _records(layout: Layout) -> list[InstanceRecord]:
    recs = []
    for meta in layout.clusters.glob("*/instances/*/meta.json"):
        rec = InstanceRecord.load(meta)
        if rec is not None:
            recs.append(rec)
    return recs


def _scan(state_dir: Path) -> Leftovers:
    state_dir = Path(state_dir).resolve()
    layout = Layout(state_dir)
    alias = link_alias(state_dir)
    found = Leftovers()
    recs = _records(layout)

    boot_prefix = str(layout.clusters) + "/"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        cmd = _cmdline(pid)
        if str(NODEINIT) in cmd and boot_prefix in cmd and proc_state(pid) not in (None, "Z", "X"):
            found.processes.append(pid)

    recorded_ns = {r.netns for r in recs}
    proc = host_run(["ip", "-j", "netns", "list"], check=False)
    for item in json.loads(proc.stdout) if proc.stdout.strip() else []:
        name = item.get("name", "")
        if not name.startswith(NETNS_PREFIX):
            continue
        if name in recorded_ns:
            found.netns.append(name)
            continue
        link = host_run(["ip", "-n", name, "-j", "link", "show", "dev", "eth0"], check=False)
        if link.returncode == 0 and link.stdout.strip():
            if any(i.get("ifalias") == alias for i in json.loads(link.stdout)):
                found.netns.append(name)

    recorded_links = {r.veth for r in recs}
    for net_file in layout.clusters.glob("*/network.json"):
        net = read_json(net_file, {})
        if net.get("bridge"):
            recorded_links.add(net["bridge"])
    proc = host_run(["ip", "-j", "link", "show"], check=False)
    for item in json.loads(proc.stdout) if proc.stdout.strip() else []:
        name = item.get("ifname", "")
        if item.get("ifalias") == alias or (name in recorded_links and not item.get("ifalias")):
            found.links.append(name)

    prefix = str(state_dir).rstrip("/") + "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        if mnt.startswith(prefix) or any(mnt == f"/run/netns/{n}" for n in found.netns):
            found.mounts.append(mnt)

    if layout.clusters.is_dir():
        found.dirs.extend(sorted(p for p in layout.clusters.iterdir()))
    return found


def find_leftovers(state_dir: Path) -> list[str]:
    """Human-readable list of this state dir's local-provider resources still on the host."""
    return _scan(Path(state_dir)).describe()


def cleanup(state_dir: Path, *, dry_run: bool = False) -> list[str]:
    """Removes every local-provider resource of ``state_dir`` (see module doc); returns what it found."""
    found = _scan(Path(state_dir))
    items = found.describe()
    if dry_run:
        return items
    for pid in found.processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(proc_state(p) not in (None, "Z", "X") for p in found.processes):
        time.sleep(0.02)
    for name in found.netns:
        host_run(["ip", "netns", "del", name], check=False)
    for mnt in sorted(found.mounts, key=len, reverse=True):
        if Path(mnt).exists() or mnt.startswith("/run/netns/"):
            host_run(["umount", "-l", mnt], check=False)
    for name in found.links:
        if Path("/sys/class/net", name).exists():
            host_run(["ip", "link", "del", name], check=False)
    for d in found.dirs:
        shutil.rmtree(d, ignore_errors=True)
    layout = Layout(Path(state_dir).resolve())
    if layout.subnets.exists():
        write_json(layout.subnets, {})
    return items
