"""`slurmpod cleanup` after a SIGKILLed server (issue 19, point 7).

A real server on the local provider builds a cluster (controller + 1 compute + the accounting host, so
slurmctld, slurmd, slurmdbd and mariadbd all run), is SIGKILLed, and ``slurmpod cleanup`` must then leave no
process, network namespace or mount of it behind. ``cleanup --check`` must report the processes before
(non-zero exit) and nothing after (exit 0).

The checks read ``/proc`` directly here (not through the code under test): a process belongs to the
cluster when its net or mount namespace is one of the nodes' (recorded while the cluster ran), or when its
root mount is an overlay whose upper dir is in the state dir.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess, free_port, seed_groups, wait_status

pytestmark = pytest.mark.integration

NAME = "cleanup-crash"
DAEMONS = {"slurmctld", "slurmd", "slurmdbd", "mariadbd"}


def _cli(state: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "cleanup", *args, "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=timeout)


def _ns_ino(pid: int, kind: str) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return 0


def _stat(pid: int) -> tuple[str, str, str] | None:
    """(comm, state, start time) of ``pid``, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw.rsplit(")", 1)[1].split()
    return comm, fields[0], fields[19]


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _overlay_in(pid: int, state: Path) -> bool:
    try:
        text = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return False
    return f"upperdir={state}/" in text


def _cluster_netns(cluster_id: str) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in Path("/run/netns").glob(f"sp-{cluster_id}-*")}


def _node_processes(state: Path, net: set[int], mnt: set[int]) -> dict[int, tuple[str, str]]:
    """pid -> (comm, start) of live processes in one of the namespaces or with an overlay of the state dir."""
    host_mnt = {_ns_ino(1, "mnt"), _ns_ino(os.getpid(), "mnt")}
    found = {}
    for pid in _pids():
        st = _stat(pid)
        if st is None or st[1] in ("Z", "X"):
            continue
        m = _ns_ino(pid, "mnt")
        if _ns_ino(pid, "net") in net or m in mnt or (m not in host_mnt and _overlay_in(pid, state)):
            found[pid] = (st[0], st[2])
    return found


def _uptime_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _mounts_under(state: Path) -> list[str]:
    prefix = str(state) + "/"
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)]


def _kill_by_pid(procs: dict[int, tuple[str, str]]) -> None:
    """Last resort for this test's own node processes (verified by start time): SIGKILL by PID."""
    for pid, (_comm, start) in procs.items():
        st = _stat(pid)
        if st is not None and st[2] == start:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def _build_and_kill(srv: ServerProcess, state: Path, install: Path | None = None,
                    ) -> tuple[str, set[int], set[int], dict[int, tuple[str, str]]]:
    """Starts the server (from the copy of slurmpod in ``install`` if given), builds the cluster, records the
    nodes' namespaces and processes, SIGKILLs the server. Returns (cluster id, net inodes, mount inodes,
    {pid: (comm, start)})."""
    cwd, saved = Path.cwd(), os.environ.get("PYTHONPATH")
    if install is not None:  # `python -m` puts the working directory first on sys.path
        os.chdir(install)
        os.environ["PYTHONPATH"] = str(install)
    try:
        srv.start()
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    c = srv.client()
    arn = c.create_cluster(ClusterName=NAME, InstanceGroups=seed_groups(1))["ClusterArn"]
    cluster_id = arn.rsplit("/", 1)[1]
    t0 = time.monotonic()
    d = wait_status(c, NAME, {"InService", "Failed"}, timeout=240)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    print(f"InService after {time.monotonic() - t0:.1f}s")

    netns = _cluster_netns(cluster_id)
    assert len(netns) == 3, netns  # controller, compute, accounting host
    net_inos = set(netns.values())
    mnt_inos = {_ns_ino(pid, "mnt") for pid in _pids() if _ns_ino(pid, "net") in net_inos}
    mnt_inos -= {_ns_ino(1, "mnt"), _ns_ino(os.getpid(), "mnt"), 0}
    deadline = time.monotonic() + 60  # slurmdbd/mariadbd may still be coming up right after InService
    while True:
        before = _node_processes(state, net_inos, mnt_inos)
        comms = {comm for comm, _ in before.values()}
        if DAEMONS <= comms or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert DAEMONS <= comms, comms
    print(f"{len(before)} node processes: {sorted(comms)}")

    srv.kill9()
    time.sleep(0.5)
    assert all(_stat(pid) is not None for pid in before), "the nodes must outlive the server"
    return cluster_id, net_inos, mnt_inos, before


def _cleanup_and_verify(state: Path, cluster_id: str, net_inos: set[int], mnt_inos: set[int],
                        before: dict[int, tuple[str, str]], *, expect_netns: bool = True) -> None:
    t1 = time.monotonic()
    check = _cli(state, "--check")
    print(f"cleanup --check (before): rc={check.returncode} in {time.monotonic() - t1:.2f}s\n{check.stdout}")
    assert check.returncode != 0, check.stdout
    lines = check.stdout.splitlines()
    reported = {int(m.group(1)) for line in lines if (m := re.match(r"process (\d+) ", line))}
    alive = {pid for pid, (_c, start) in before.items() if (st := _stat(pid)) and st[2] == start}
    assert alive <= reported, f"not reported: {sorted(alive - reported)}"
    for daemon in DAEMONS:
        assert any(line.startswith("process ") and f"({daemon})" in line for line in lines), daemon
    assert any(line.startswith("netns ") for line in lines) == expect_netns, lines

    t2 = time.monotonic()
    ticks_at_cleanup = _uptime_ticks()
    out = _cli(state)
    print(f"cleanup: rc={out.returncode} in {time.monotonic() - t2:.2f}s\n{out.stdout}{out.stderr}")
    assert out.returncode == 0, out.stderr
    assert any(line.startswith("removed process ") for line in out.stdout.splitlines()), out.stdout
    assert "STILL RUNNING" not in out.stdout and "still present" not in out.stdout, out.stdout

    survivors = {pid: v for pid, v in before.items() if (st := _stat(pid)) and st[2] == v[1] and
                 st[1] not in ("Z", "X")}
    assert survivors == {}, survivors
    # a namespace inode may be reused by a namespace created since: only processes started before count
    left = {pid: v for pid, v in _node_processes(state, net_inos, mnt_inos).items()
            if int(v[1]) <= ticks_at_cleanup or _overlay_in(pid, state)}
    assert left == {}, left
    assert _cluster_netns(cluster_id) == {}
    assert _mounts_under(state) == []
    assert not list(Path("/sys/class/net").glob(f"sp{cluster_id[:10]}*"))

    after = _cli(state, "--check")
    print(f"cleanup --check (after): rc={after.returncode}\n{after.stdout}")
    assert after.returncode == 0, after.stdout
    assert after.stdout.strip() == "no leftovers"


def test_cleanup_after_server_sigkill_leaves_nothing(local_state: Path) -> None:
    state = local_state.resolve()
    srv = ServerProcess(state, free_port(), "--provider", "local")
    before: dict[int, tuple[str, str]] = {}
    try:
        cluster_id, net_inos, mnt_inos, before = _build_and_kill(srv, state)
        _cleanup_and_verify(state, cluster_id, net_inos, mnt_inos, before)
    finally:
        srv.stop()
        _kill_by_pid(before)


def test_cleanup_after_a_partial_cleanup_of_another_install(local_state: Path, tmp_path: Path) -> None:
    """The issue's case: the server ran another copy of slurmpod (another ``nodeinit.py`` path in the holders'
    command lines), and an earlier cleanup already removed the nodes' netns and directories (records gone)
    but left their processes. ``cleanup --check`` must still see them, and ``cleanup`` end them."""
    import slurmpod

    state = local_state.resolve()
    alt = tmp_path / "other-install"
    shutil.copytree(Path(slurmpod.__file__).parent, alt / "slurmpod", ignore=shutil.ignore_patterns("__pycache__"))
    srv = ServerProcess(state, free_port(), "--provider", "local")
    before: dict[int, tuple[str, str]] = {}
    try:
        cluster_id, net_inos, mnt_inos, before = _build_and_kill(srv, state, alt)
        holders = [a for pid in before if (a := _argv(pid)) and a[0] == "unshare"]
        assert holders and all(str(alt) in " ".join(a) for a in holders), holders
        for name in _cluster_netns(cluster_id):
            subprocess.run(["ip", "netns", "del", name], check=True, timeout=30)
        shutil.rmtree(state / "local" / "clusters" / cluster_id)
        assert all(_stat(pid) is not None for pid in before), "the nodes must survive the partial cleanup"
        _cleanup_and_verify(state, cluster_id, net_inos, mnt_inos, before, expect_netns=False)
        # the nodes' cgroups too, found through their processes (their records were gone)
        from slurmpod.providers.local.holder import node_cgroup

        iids = {a[-1].rsplit("/instances/", 1)[1].split("/")[0] for a in holders}
        left = [c for i in iids if (c := node_cgroup(i)) is not None and c.exists()]
        assert iids and not left, left
    finally:
        srv.stop()
        _kill_by_pid(before)
