"""Unit tests of how ``cleanup`` recognises node processes (a fake ``/proc`` tree) and ends them (own children)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmpod.providers.local.cleanup import CleanupReport, Leftovers, end_processes
from slurmpod.providers.local.nodeinit import BASH_REAPER
from slurmpod.providers.local.procscan import (
    NodeProcess,
    NodeRef,
    ProcFS,
    _holder_node,
    _overlay_node,
    scan_processes,
)
from slurmpod.providers.local.state import InstanceRecord

HOST_NET, HOST_MNT, HOST_PID = 4026531840, 4026531841, 4026531836
A_NET, A_MNT, A_PID = 4026532001, 4026532002, 4026532003
B_NET, B_MNT, B_PID = 4026532101, 4026532102, 4026532103
O_NET, O_MNT, O_PID = 4026532201, 4026532202, 4026532203  # a node of another state dir
SELF = 50


class FakeProc:
    """Writes a ``/proc``-like tree: stat, cmdline, status (NSpid), ns/* and root/cwd symlinks, mountinfo."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        os.symlink(str(SELF), root / "self")

    def add(self, pid: int, comm: str, argv: list[str], *, ppid: int = 1, state: str = "S", start: int = 0,
            ns: tuple[int, int, int] = (HOST_NET, HOST_MNT, HOST_PID), nspid: tuple[int, ...] = (),
            root: str = "/", cwd: str = "/", mountinfo: str = "") -> None:
        d = self.root / str(pid)
        (d / "ns").mkdir(parents=True)
        rest = " ".join(["0"] * 17)
        (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {rest} {start or 1000 + pid} 0 0\n")
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        (d / "status").write_text(f"Name:\t{comm}\nNSpid:\t" + "\t".join(map(str, (pid, *nspid))) + "\n")
        for kind, ino in zip(("net", "mnt", "pid"), ns, strict=True):
            os.symlink(f"{kind}:[{ino}]", d / "ns" / kind)
        os.symlink(root, d / "root")
        os.symlink(cwd, d / "cwd")
        (d / "mountinfo").write_text(mountinfo)


def overlay_line(state: Path, cluster: str, instance: str) -> str:
    inst = f"{state}/local/clusters/{cluster}/instances/{instance}"
    return (f"3046 3001 0:187 / / rw,relatime - overlay overlay rw,lowerdir=/,upperdir={inst}/upper,"
            f"workdir={inst}/work\n3047 3046 0:190 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n")


def boot(state: Path, cluster: str, instance: str) -> str:
    return f"{state}/local/clusters/{cluster}/instances/{instance}/boot.json"


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path, FakeProc]:
    state = tmp_path / "state"
    other = tmp_path / "state2"  # another state dir, and one whose name starts like ours
    (state / "local" / "clusters").mkdir(parents=True)
    fake = FakeProc(tmp_path / "proc")
    fake.add(1, "init", ["/sbin/init"], ppid=0)
    fake.add(2, "kthreadd", [], ppid=0)
    fake.add(40, "bash", ["bash"], ppid=1)
    fake.add(SELF, "slurmpod", ["python", "-m", "slurmpod.cli", "cleanup"], ppid=40)
    return state, other, fake


def pids(found: list[NodeProcess]) -> dict[int, str]:
    return {p.pid: p.why for p in found}


def test_holders_and_everything_in_their_namespaces(world: tuple[Path, Path, FakeProc]) -> None:
    state, other, fake = world
    b = boot(state, "c1", "i-0000000000000000a")
    a_ns = (A_NET, A_MNT, A_PID)
    # the holder was started by a server running another copy of slurmpod (another nodeinit.py path)
    fake.add(100, "unshare", ["unshare", "--uts", "--ipc", "--mount", "--pid", "--fork", "--kill-child",
                              "--propagation", "private", "/usr/bin/python3", "-I", "/old/co/nodeinit.py", b],
             ns=(A_NET, A_MNT, HOST_PID))
    fake.add(101, "bash", ["bash", "-c", BASH_REAPER, "slurmpod-nodeinit", "/old/co/nodeinit.py", b], ppid=100,
             ns=a_ns, nspid=(1,))
    fake.add(102, "slurmctld", ["/usr/sbin/slurmctld"], ppid=101, ns=a_ns, nspid=(20,))
    fake.add(103, "sleep", ["sleep", "3600"], ppid=101, ns=a_ns, nspid=(2,))
    fake.add(104, "slurmctld", ["/usr/sbin/slurmctld"], ppid=101, ns=a_ns, state="Z")  # zombie: not listed
    # the dead server's `nsenter -t HOLDER -n -u -i -m -p`: in the node's net/mnt namespaces, host PID ns
    fake.add(110, "nsenter", ["nsenter", "-t", "101", "-n", "-m", "-p", "--", "scontrol"], ns=(A_NET, A_MNT, HOST_PID))
    # an `nsenter -p` only (host net and mount namespaces): caught by the node's PID namespace
    fake.add(111, "sh", ["sh"], ns=(HOST_NET, HOST_MNT, A_PID), nspid=(30,))
    # not yet exec'd into unshare: nothing of the node yet (a rescan catches what it becomes)
    fake.add(120, "nsenter", ["nsenter", "--net=/run/netns/sp-c1-0000000a", "unshare", "--pid", "--fork",
                              "python3", "-I", "/x/nodeinit.py", b])
    # an operator's shell in the state dir, and an editor on a boot file: host processes
    fake.add(130, "bash", ["bash"], cwd=f"{state}/local/clusters/c1")
    fake.add(131, "less", ["less", "/x/nodeinit.py", b])

    found = scan_processes(state, ProcFS(fake.root))
    assert pids(found) == {100: "holder", 101: "holder", 102: "netns", 103: "netns", 110: "netns",
                           111: "pidns"}
    holders = {p.pid for p in found if p.holder}
    assert holders == {100, 101}
    line = next(p for p in found if p.pid == 102).describe()
    assert line == "process 102 (slurmctld) of node c1/i-0000000000000000a [netns]"
    assert scan_processes(other, ProcFS(fake.root)) == []


def test_no_holder_no_record_no_netns_name_still_found(world: tuple[Path, Path, FakeProc]) -> None:
    """After a half-finished cleanup removed records and netns: the overlay root and the children tell."""
    state, other, fake = world
    b_ns = (B_NET, B_MNT, B_PID)
    over = overlay_line(state, "c2", "i-0000000000000000b")
    fake.add(200, "mariadbd", ["/usr/sbin/mariadbd", "--no-defaults"], ns=b_ns, nspid=(40,), mountinfo=over)
    fake.add(201, "mariadbd", ["/usr/sbin/mariadbd"], ppid=200, ns=b_ns, nspid=(41,), mountinfo=over)
    # a re-parented child that left every namespace (e.g. after setns back): found through PPid
    fake.add(202, "logger", ["logger"], ppid=200)
    fake.add(203, "cat", ["cat"], ppid=202)
    # root directory inside the state dir's cluster tree
    fake.add(210, "sh", ["sh"], root=f"{state}/local/clusters/c3/instances/i-0000000000000000c/mnt")
    # a node of another state dir (overlay under state2, a path with our state dir as a string prefix)
    over2 = overlay_line(other, "c2", "i-0000000000000000b")
    o_ns = (O_NET, O_MNT, O_PID)
    fake.add(300, "bash", ["bash", "-c", BASH_REAPER, "slurmpod-nodeinit", "/x/nodeinit.py",
                           boot(other, "c2", "i-0000000000000000b")], ns=o_ns, nspid=(1,), mountinfo=over2)
    fake.add(301, "slurmd", ["/usr/sbin/slurmd"], ppid=300, ns=o_ns, nspid=(5,), mountinfo=over2)
    # a container of someone else (private mount namespace, an overlay elsewhere)
    fake.add(400, "nginx", ["nginx"], ns=(4026533001, 4026533002, 4026533003), nspid=(1,),
             mountinfo="1 0 0:50 / / rw - overlay overlay rw,lowerdir=/l,upperdir=/var/lib/docker/u,workdir=/w\n")

    found = scan_processes(state, ProcFS(fake.root))
    assert pids(found) == {200: "overlay", 201: "overlay", 202: "child of 200", 203: "child of 202", 210: "root"}
    assert {p.node for p in found if p.pid in (200, 202)} == {"c2/i-0000000000000000b"}
    assert {p.instance_id for p in found if p.pid in (200, 202)} == {"i-0000000000000000b"}
    assert next(p for p in found if p.pid == 210).node == "c3/i-0000000000000000c"
    assert pids(scan_processes(other, ProcFS(fake.root))) == {300: "holder", 301: "netns"}


def test_netns_inodes_and_records(world: tuple[Path, Path, FakeProc]) -> None:
    state, _other, fake = world
    rec = InstanceRecord(cluster_id="c1", instance_id="i-0000000000000000a", group="g", instance_type="t",
                         image_id="ami", image_root="/", volumes=[], ip="10.0.0.10", hostname="ip-10-0-0-10",
                         netns="sp-c1-0000000a", veth="spv", holder_pid=101, holder_start="5000",
                         unshare_pid=100, unshare_start="4999")
    a_ns = (A_NET, A_MNT, A_PID)
    fake.add(100, "unshare", ["unshare", "odd"], start=4999, ns=(A_NET, A_MNT, HOST_PID))
    fake.add(101, "python3", ["python3", "odd"], ppid=100, start=5000, ns=a_ns, nspid=(1,))
    fake.add(102, "munged", ["munged"], ppid=101, ns=a_ns, nspid=(7,))
    fake.add(150, "ip", ["ip", "monitor"], ns=(A_NET, HOST_MNT, HOST_PID))  # `ip netns exec` into the node
    netns = {A_NET: NodeRef("c1", rec.instance_id, rec.hostname, rec.netns)}
    found = scan_processes(state, ProcFS(fake.root), netns, [rec])
    assert pids(found) == {100: "record", 101: "record", 102: "netns", 150: "netns"}
    assert next(p for p in found if p.pid == 150).describe() == (
        "process 150 (ip) of node c1/i-0000000000000000a ip-10-0-0-10 netns sp-c1-0000000a [netns]")
    # a stale record (the PID now belongs to a host process started later) matches nothing
    stale = InstanceRecord(**{**rec.__dict__, "holder_pid": 40, "holder_start": "123", "unshare_pid": 1,
                              "unshare_start": "1001"})
    assert pids(scan_processes(state, ProcFS(fake.root), {}, [stale])) == {}


def test_host_and_own_namespaces_and_ancestors_are_never_a_nodes(world: tuple[Path, Path, FakeProc]) -> None:
    state, _other, fake = world
    b = boot(state, "c1", "i-0000000000000000a")
    # a (broken) holder that is PID 1 of its namespace but still in the host's mount and net namespaces
    fake.add(100, "bash", ["bash", "-c", BASH_REAPER, "slurmpod-nodeinit", "/x/nodeinit.py", b],
             ns=(HOST_NET, HOST_MNT, A_PID), nspid=(1,))
    fake.add(160, "sshd", ["sshd"])  # an ordinary host process
    # and a netns map that (wrongly) names the host's netns
    found = scan_processes(state, ProcFS(fake.root), {HOST_NET: NodeRef("c1", "x")})
    assert pids(found) == {100: "holder"}


@pytest.mark.parametrize(("argv", "expected"), [
    (["unshare", "--fork", "python3", "-I", "/a/nodeinit.py", "{b}"], ("c", "i-1", False)),
    (["/usr/bin/python3", "-I", "/a/nodeinit.py", "{b}"], ("c", "i-1", True)),
    (["/usr/bin/python3", "-I", "-S", "/a/nodeinit.py", "{b}"], ("c", "i-1", True)),  # since the boot trims
    (["bash", "-c", "loop", "slurmpod-nodeinit", "/a/nodeinit.py", "{b}"], ("c", "i-1", True)),
    (["nsenter", "--net=/run/netns/x", "unshare", "python3", "-I", "/a/nodeinit.py", "{b}"], None),
    (["vi", "/a/nodeinit.py", "{b}"], None),
    (["python3", "-I", "/a/nodeinit.py", "{b}.bak"], None),
    (["python3", "-I", "/a/nodeinit.py", "/elsewhere/local/clusters/c/instances/i-1/boot.json"], None),
])
def test_holder_command_lines(argv: list[str], expected: tuple[str, str, bool] | None) -> None:
    clusters = "/var/lib/sp/local/clusters"
    b = f"{clusters}/c/instances/i-1/boot.json"
    assert _holder_node([a.replace("{b}", b) for a in argv], clusters) == expected


def test_overlay_parse() -> None:
    clusters = "/s/local/clusters"
    assert _overlay_node(overlay_line(Path("/s"), "c9", "i-9"), clusters) == ("c9", "i-9")
    assert _overlay_node(overlay_line(Path("/s2"), "c9", "i-9"), clusters) is None
    bind = "5 1 8:1 /s/local/clusters/c9/instances/i-9/upper /x rw - ext4 /dev/sda1 rw,upperdir=" + clusters
    assert _overlay_node(bind, clusters) is None


def test_real_proc_finds_nothing_for_an_unused_state_dir(tmp_path: Path) -> None:
    assert scan_processes(tmp_path) == []


# ---- ending processes (real children of this test) -----------------------------------------------------


def _child(code: str) -> tuple[subprocess.Popen[bytes], NodeProcess]:
    """A child running ``code`` (which prints a line once it is ready) and its identity."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    info = ProcFS().info(p.pid)
    assert info is not None
    return p, NodeProcess(pid=p.pid, start=info.start, ppid=os.getpid(), comm="python", node="c/i", why="test")


def test_end_processes_sigterm_then_sigkill() -> None:
    polite, np = _child("import time; print('ready', flush=True); time.sleep(60)")
    stubborn, ns = _child("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('ready', flush=True); time.sleep(60)")
    other, no = _child("import time; print('ready', flush=True); time.sleep(60)")
    wrong = NodeProcess(pid=no.pid, start=str(int(no.start) + 1), ppid=0, comm="python", node="c/i", why="x")
    try:
        t0 = time.monotonic()
        how, survivors = end_processes([np, ns, wrong], rescan=list, grace=1.0, kill_wait=5.0)
        took = time.monotonic() - t0
        assert how == {np.pid: "SIGTERM", ns.pid: "SIGKILL", wrong.pid: "exiting on its own"}
        assert survivors == []
        assert 1.0 <= took < 4.0, took
        assert polite.wait(5) == -signal.SIGTERM
        assert stubborn.wait(5) == -signal.SIGKILL
        assert other.poll() is None, "a process with another start time (a reused PID) was signalled"
    finally:
        for p in (polite, stubborn, other):
            if p.poll() is None:
                p.kill()
            p.wait(5)


def test_report_lines() -> None:
    p1 = NodeProcess(1234, "9", 1, "slurmd", "c/i", "netns")
    p2 = NodeProcess(1235, "9", 1, "mariadbd", "c/i", "overlay")
    rep = CleanupReport(found=Leftovers(processes=[p1, p2], netns=["sp-c-i"], dirs=[Path("/s/local/clusters/c")]))
    rep.ended = [(p1, "SIGTERM")]
    rep.survivors = [p2]
    rep.remaining = [p2.describe(), "dir /s/local/clusters/c"]
    assert not rep.ok
    assert rep.lines() == [
        "process 1234 (slurmd) of node c/i [netns]: ended by SIGTERM",
        "netns sp-c-i",
        "dir /s/local/clusters/c",
        "process 1235 (mariadbd) of node c/i [overlay]: STILL RUNNING after SIGKILL",
        "dir /s/local/clusters/c: still present after cleanup",
    ]
