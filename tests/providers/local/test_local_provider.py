"""Integration tests of the local provider: real namespaces, overlay roots, munged inside nodes.

Needs root plus iproute2, util-linux, munge and Slurm (``check_host``); skipped otherwise.
One module-scoped cluster with two nodes keeps the module fast; every fixture tears down in ``finally``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from slurmpod.providers.base import (
    InstanceRequest,
    InsufficientCapacity,
    PermanentProviderError,
    SetupError,
    TemporaryProviderError,
    VolumeMount,
)
from slurmpod.providers.local import LocalProvider, check_host, cleanup, find_leftovers

pytestmark = pytest.mark.integration

try:
    check_host()
    _SKIP = ""
except SetupError as exc:
    _SKIP = str(exc)
if _SKIP:
    pytest.skip(f"local provider unavailable: {_SKIP}", allow_module_level=True)

CLUSTER = "lpaclust0001"
OTHER = "lpbclust0002"
IMAGE = "/"
VOLS = (VolumeMount("shared", "/shared"), VolumeMount("slurm-state", "/var/lib/slurm/slurmctld"))
IDS = ("i-00000000000000a01", "i-00000000000000b02")


def request(instance_id: str, cluster: str = CLUSTER, itype: str = "ml.c5.xlarge") -> InstanceRequest:
    return InstanceRequest(cluster_id=cluster, instance_id=instance_id, group="workers", instance_type=itype,
                           image_id="ami-0123456789abcdef0", image_root=IMAGE, volumes=VOLS)


def run(provider: LocalProvider, iid: str, *argv: str, cluster: str = CLUSTER, check: bool = True,
        timeout: float = 20) -> str:
    res = provider.runner(cluster, iid).run(list(argv), timeout=timeout)
    if check:
        assert res.returncode == 0, (argv, res.stdout, res.stderr)
    return res.stdout


def our_netns(state_dir: Path) -> list[str]:
    return [item for item in find_leftovers(state_dir) if item.startswith("netns ")]


@pytest.fixture(scope="module")
def state_dir() -> Iterator[Path]:
    # Not under /tmp: nodes get a private /tmp anyway, this exercises hiding the state dir explicitly.
    path = Path(tempfile.mkdtemp(prefix="slurmpod-localprov-", dir="/var/tmp"))
    try:
        yield path
    finally:
        leftovers = cleanup(path)  # safety net: everything must already be gone
        shutil.rmtree(path, ignore_errors=True)
        assert leftovers == []


@pytest.fixture(scope="module")
def provider(state_dir: Path) -> Iterator[LocalProvider]:
    prov = LocalProvider(state_dir)
    try:
        prov.prepare_cluster(CLUSTER)
        yield prov
    finally:
        prov.teardown_cluster(CLUSTER)
        prov.teardown_cluster(OTHER)


@pytest.fixture(scope="module")
def nodes(provider: LocalProvider) -> dict[str, object]:
    out: dict[str, object] = {}
    for iid in IDS:
        t0 = time.monotonic()
        out[iid] = provider.launch(request(iid))
        sys.stderr.write(f"launch {iid}: {time.monotonic() - t0:.3f}s\n")
    return out


def test_distinct_addresses_and_hostnames(provider: LocalProvider, nodes: dict) -> None:
    a, b = (nodes[i] for i in IDS)
    assert a.ip != b.ip and a.hostname != b.hostname
    assert a.alive and b.alive
    assert a.hostname == "ip-" + a.ip.replace(".", "-")
    assert run(provider, a.instance_id, "hostname").strip() == a.hostname
    assert run(provider, b.instance_id, "hostname").strip() == b.hostname
    hosts = run(provider, a.instance_id, "cat", "/etc/hosts")
    assert f"{a.ip} {a.hostname}" in hosts and f"{b.ip} {b.hostname}" in hosts
    resolv = run(provider, a.instance_id, "cat", "/etc/resolv.conf")
    assert not [line for line in resolv.splitlines() if line.startswith("nameserver")]


def test_launch_is_idempotent(provider: LocalProvider, nodes: dict) -> None:
    before = json.loads((provider.layout.instance(CLUSTER, IDS[0]) / "meta.json").read_text())
    again = provider.launch(request(IDS[0]))
    after = json.loads((provider.layout.instance(CLUSTER, IDS[0]) / "meta.json").read_text())
    assert again == nodes[IDS[0]]
    assert before["holder_pid"] == after["holder_pid"] and before["boots"] == after["boots"]


def test_root_isolation_and_state_hidden(provider: LocalProvider, nodes: dict, state_dir: Path) -> None:
    a, b = IDS
    run(provider, a, "sh", "-c", "echo node-a > /etc/marker")
    assert run(provider, a, "cat", "/etc/marker").strip() == "node-a"
    assert provider.runner(CLUSTER, b).run(["test", "-e", "/etc/marker"], timeout=10).returncode == 1
    assert not Path("/etc/marker").exists()
    # the provider's state dir (other nodes' root volumes) is invisible inside nodes
    assert run(provider, a, "ls", "-A", str(state_dir)).strip() == ""
    # own PID namespace: PID 1 is the holder
    assert "nodeinit" in run(provider, a, "cat", "/proc/1/cmdline")
    assert run(provider, a, "findmnt", "-n", "-o", "FSTYPE", "/").strip() == "overlay"


def test_nodes_reach_each_other(provider: LocalProvider, nodes: dict) -> None:
    a, b = (nodes[i] for i in IDS)
    server = ("import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
              "s.bind(('0.0.0.0',7777));s.listen();s.settimeout(10);c,_=s.accept();c.sendall(b'pong');c.close()")
    run(provider, b.instance_id, "sh", "-c", f"python3 -c \"{server}\" >/dev/null 2>&1 &")
    client = ("import socket,time\nfor _ in range(100):\n try:\n"
              f"  c=socket.create_connection(('{b.ip}',7777),1)"
              "\n  print(c.recv(4).decode());break\n except OSError:\n  time.sleep(0.02)")
    assert run(provider, a.instance_id, "python3", "-c", client).strip() == "pong"


def test_getsockname_returns_node_address(provider: LocalProvider, nodes: dict) -> None:
    a = nodes[IDS[0]]
    for dst in ("10.0.0.1", "8.8.8.8"):
        code = f"import socket;s=socket.socket(2,2);s.connect(('{dst}',53));print(s.getsockname()[0])"
        assert run(provider, a.instance_id, "python3", "-c", code).strip() == a.ip


def test_volume_shared_between_instances(provider: LocalProvider, nodes: dict) -> None:
    a, b = IDS
    run(provider, a, "sh", "-c", "echo shared-data > /shared/f")
    assert run(provider, b, "cat", "/shared/f").strip() == "shared-data"
    assert (provider.layout.volume(CLUSTER, "shared") / "f").read_text().strip() == "shared-data"


def test_daemon_directories(provider: LocalProvider, nodes: dict) -> None:
    out = run(provider, IDS[1], "stat", "-c", "%n %U", "/etc/slurm", "/var/spool/slurmd",
              "/var/spool/slurmctld", "/var/log/slurm", "/run/slurm", "/var/lib/munge", "/var/log/munge",
              "/run/munge", "/etc/munge")
    owners = dict(line.split() for line in out.splitlines())
    assert owners["/var/spool/slurmctld"] == "slurm" and owners["/var/log/slurm"] == "slurm"
    assert owners["/run/munge"] == "munge" and owners["/var/lib/munge"] == "munge"
    assert owners["/etc/slurm"] == "root"


def test_munge_inside_node(provider: LocalProvider, nodes: dict) -> None:
    a = IDS[0]
    key = os.urandom(1024)
    r = provider.runner(CLUSTER, a)
    res = r.run(["sh", "-c", "cat > /etc/munge/munge.key && chown munge:munge /etc/munge/munge.key "
                 "&& chmod 0400 /etc/munge/munge.key"], timeout=10, input=key)
    assert res.returncode == 0, res.stderr
    res = r.run(["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "munged"], timeout=10)
    assert res.returncode == 0, res.stderr
    for _ in range(200):
        if r.run(["test", "-S", "/run/munge/munge.socket.2"], timeout=5).returncode == 0:
            break
        time.sleep(0.02)
    res = r.run(["sh", "-c", "munge -n | unmunge"], timeout=10)
    assert res.returncode == 0 and re.search(r"STATUS:\s+Success", res.stdout), res.stdout + res.stderr
    # munged re-parented to the node's PID 1 and stays in the node's PID namespace
    pid = run(provider, a, "cat", "/run/munge/munged.pid").strip()
    assert run(provider, a, "ps", "-o", "ppid=", "-p", pid).strip() == "1"


def test_orphans_are_reaped_by_node_pid1(provider: LocalProvider, nodes: dict) -> None:
    r = provider.runner(CLUSTER, IDS[1])
    assert r.run(["sh", "-c", "(sleep 0.05 &); (sleep 0.05 &); true"], timeout=10).returncode == 0
    time.sleep(0.4)
    states = r.run(["ps", "-eo", "stat="], timeout=10).stdout.split()
    assert not [st for st in states if st.startswith("Z")]


def test_check_host_cidr() -> None:
    check_host(cidr="10.231.0.0/16")
    routes = json.loads(subprocess.run(["ip", "-j", "route"], capture_output=True, text=True,
                                       timeout=10).stdout or "[]")
    taken = [r["dst"] for r in routes if r.get("dst") not in (None, "default") and "/" in r["dst"]
             and not str(r.get("dev", "")).startswith("sp")]
    if taken:
        with pytest.raises(SetupError, match="--local-cidr"):
            check_host(cidr=taken[0])


def test_readoption_by_new_provider_object(provider: LocalProvider, nodes: dict, state_dir: Path) -> None:
    fresh = LocalProvider(state_dir)
    seen = {i.instance_id: i for i in fresh.list_instances(CLUSTER)}
    assert set(seen) == set(IDS) and all(i.alive for i in seen.values())
    meta = provider.layout.instance(CLUSTER, IDS[0]) / "meta.json"
    pid_before = json.loads(meta.read_text())["holder_pid"]
    assert fresh.launch(request(IDS[0])) == nodes[IDS[0]]
    assert json.loads(meta.read_text())["holder_pid"] == pid_before
    assert run(fresh, IDS[0], "hostname").strip() == nodes[IDS[0]].hostname


def test_node_survives_death_of_launching_process(state_dir: Path, provider: LocalProvider) -> None:
    iid = "i-00000000000000c03"
    code = ("import sys,os;from pathlib import Path;sys.path.insert(0,sys.argv[1]);"
            "from slurmpod.providers.local import LocalProvider;"
            "from slurmpod.providers.base import InstanceRequest;"
            f"LocalProvider(Path(sys.argv[2])).launch(InstanceRequest('{OTHER}','{iid}','g','ml.t3.medium',"
            "'ami-0123456789abcdef0','/'));print('up',flush=True);os.kill(os.getpid(),9)")
    root = str(Path(__file__).resolve().parents[3])
    proc = subprocess.run([sys.executable, "-c", code, root, str(state_dir)], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip() == "up", proc.stderr
    try:
        (inst,) = LocalProvider(state_dir).list_instances(OTHER)
        assert inst.alive
        assert run(provider, iid, "hostname", cluster=OTHER).strip() == inst.hostname
        # another cluster: own subnet, cannot see the first cluster's hosts
        assert inst.ip.rsplit(".", 1)[0] != provider.list_instances(CLUSTER)[0].ip.rsplit(".", 1)[0]
    finally:
        provider.teardown_cluster(OTHER)
    assert provider.list_instances(OTHER) == []


def test_reboot_keeps_identity_and_root_volume(provider: LocalProvider, nodes: dict) -> None:
    a = IDS[0]
    run(provider, a, "sh", "-c", "echo kept > /root/reboot-marker")
    old = json.loads((provider.layout.instance(CLUSTER, a) / "meta.json").read_text())
    inst = provider.reboot(CLUSTER, a)
    assert (inst.ip, inst.hostname, inst.alive) == (nodes[a].ip, nodes[a].hostname, True)
    assert run(provider, a, "cat", "/root/reboot-marker").strip() == "kept"
    assert run(provider, a, "hostname").strip() == nodes[a].hostname
    assert not Path(f"/proc/{old['holder_pid']}").exists() or \
        Path(f"/proc/{old['holder_pid']}/stat").read_text().split(")")[1].split()[19] != old["holder_start"]
    # every process of the previous boot (munged) is gone
    assert provider.runner(CLUSTER, a).run(["pgrep", "-x", "munged"], timeout=10).returncode == 1


def test_replace_root_volume_wipes_but_keeps_identity(provider: LocalProvider, nodes: dict) -> None:
    a = IDS[0]
    inst = provider.replace_root_volume(request(a))
    assert (inst.ip, inst.hostname) == (nodes[a].ip, nodes[a].hostname)
    r = provider.runner(CLUSTER, a)
    assert r.run(["test", "-e", "/etc/marker"], timeout=10).returncode == 1
    assert r.run(["test", "-e", "/root/reboot-marker"], timeout=10).returncode == 1
    assert run(provider, a, "cat", "/shared/f").strip() == "shared-data"  # volumes survive
    assert run(provider, a, "hostname").strip() == nodes[a].hostname


def test_runner_timeout_and_unknown_instance(provider: LocalProvider, nodes: dict) -> None:
    r = provider.runner(CLUSTER, IDS[1])
    t0 = time.monotonic()
    with pytest.raises(TemporaryProviderError):
        r.run(["sleep", "31"], timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert r.run(["pgrep", "-f", "sleep 31"], timeout=10).returncode == 1  # killed (and reaped) in the node
    res = r.run(["sh", "-c", "pwd; echo $HOME; echo $PATH; echo $FOO"], timeout=10, env={"FOO": "bar"},
                cwd="/tmp")
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert res.stdout.split() == ["/tmp", "/root", path, "bar"]
    assert r.run(["sh", "-c", "exit 3"], timeout=10).returncode == 3
    with pytest.raises(TemporaryProviderError):
        provider.runner(CLUSTER, "i-doesnotexist0000").run(["true"], timeout=5)
    with pytest.raises(PermanentProviderError):
        provider.reboot(CLUSTER, "i-doesnotexist0000")
    argv = r.interactive_argv(["bash", "-l"])
    assert argv[0] == "nsenter" and argv[-2:] == ["bash", "-l"]


def test_capacity_limit(state_dir: Path, provider: LocalProvider, nodes: dict) -> None:
    limited = LocalProvider(state_dir, capacity={"ml.c5.xlarge": 2, "ml.g5.xlarge": 0})
    with pytest.raises(InsufficientCapacity) as exc:
        limited.launch(request("i-00000000000000d04"))
    assert "ml.c5.xlarge" in str(exc.value)
    with pytest.raises(InsufficientCapacity):
        limited.launch(request("i-00000000000000d05", itype="ml.g5.xlarge"))
    assert {i.instance_id for i in limited.list_instances(CLUSTER)} == set(IDS)


def test_terminate_and_teardown_leave_nothing(state_dir: Path) -> None:
    prov = LocalProvider(state_dir)
    cid = "lpcclust0003"
    prov.prepare_cluster(cid)
    try:
        inst = prov.launch(request("i-00000000000000e05", cluster=cid))
        runner = prov.runner(cid, inst.instance_id)
        meta = json.loads((prov.layout.instance(cid, inst.instance_id) / "meta.json").read_text())
        prov.terminate(cid, inst.instance_id)
        prov.terminate(cid, inst.instance_id)  # idempotent
        assert prov.list_instances(cid) == []
        assert not Path(f"/run/netns/{meta['netns']}").exists()
        assert not Path(f"/proc/{meta['holder_pid']}").exists()
        assert inst.hostname not in prov.layout.hosts(cid).read_text()
        with pytest.raises(TemporaryProviderError):
            runner.run(["true"], timeout=5)
    finally:
        prov.teardown_cluster(cid)
        prov.teardown_cluster(cid)  # idempotent
    assert not prov.layout.cluster(cid).exists()
    assert not Path(f"/sys/class/net/sp{cid[:10]}").exists()
    assert not [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if str(state_dir) in m]


def test_a_bridge_left_without_its_address_gets_it_back(state_dir: Path) -> None:
    """A server killed between creating the cluster bridge (alias set) and giving it the host's .1 address: the
    next prepare adds the address, so the package proxy and the registry can listen on it."""
    from slurmpod.providers.local import netns

    prov = LocalProvider(state_dir)
    cid = "lpcclust0004"
    prov.prepare_cluster(cid)
    try:
        net = json.loads(prov.layout.network(cid).read_text())
        gateway = netns.gateway_ip(net["subnet"])
        subprocess.run(["ip", "addr", "flush", "dev", net["bridge"]], check=True, timeout=10)
        assert not netns.has_address(gateway)
        prov.prepare_cluster(cid)
        assert netns.has_address(gateway)
        assert gateway in prov.services.pkgproxy.status()[1]  # (with the module cluster's bridge address)
        assert gateway in [ip for ip, _ in prov.services.registry.status()]
    finally:
        prov.teardown_cluster(cid)


def test_crashed_node_reported_dead_then_rebooted(provider: LocalProvider, nodes: dict) -> None:
    b = IDS[1]
    meta = provider.layout.instance(CLUSTER, b) / "meta.json"
    os.kill(json.loads(meta.read_text())["holder_pid"], 9)
    for _ in range(200):
        if not {i.instance_id: i for i in provider.list_instances(CLUSTER)}[b].alive:
            break
        time.sleep(0.01)
    assert not {i.instance_id: i for i in LocalProvider(provider.state_dir).list_instances(CLUSTER)}[b].alive
    with pytest.raises(TemporaryProviderError):
        provider.runner(CLUSTER, b).run(["true"], timeout=5)
    inst = provider.reboot(CLUSTER, b)
    assert inst.alive and inst.ip == nodes[b].ip
    assert run(provider, b, "cat", "/shared/f").strip() == "shared-data"


def _holders_of(boot_file: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.isdigit() and cmd and b"unshare" not in cmd[0] and str(boot_file).encode() in cmd:
            found.append(int(entry))
    return found


def test_unrecorded_holder_is_replaced_not_doubled(provider: LocalProvider, nodes: dict) -> None:
    """slurmpod killed between starting a holder and recording it: launch() must not mount twice."""
    b = IDS[1]
    inst_dir = provider.layout.instance(CLUSTER, b)
    data = json.loads((inst_dir / "meta.json").read_text())
    data.update(holder_pid=0, holder_start="", unshare_pid=0, unshare_start="", mntns="", netns_inode=0)
    (inst_dir / "meta.json").write_text(json.dumps(data))
    fresh = LocalProvider(provider.state_dir)
    assert fresh.launch(request(b)).alive
    assert len(_holders_of(inst_dir / "boot.json")) == 1
    assert run(fresh, b, "hostname").strip() == nodes[b].hostname


def test_parallel_launches_get_distinct_addresses(provider: LocalProvider, nodes: dict) -> None:
    ids = [f"i-0000000000000f{k:03d}" for k in range(6)]
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            launched = list(pool.map(lambda i: provider.launch(request(i, itype="ml.t3.small")), ids))
        sys.stderr.write(f"6 parallel launches: {time.monotonic() - t0:.3f}s\n")
        assert len({i.ip for i in launched}) == 6 and all(i.alive for i in launched)
        hosts = provider.layout.hosts(CLUSTER).read_text()
        assert all(i.hostname in hosts for i in launched)
    finally:
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(lambda i: provider.terminate(CLUSTER, i), ids))
    assert {i.instance_id for i in provider.list_instances(CLUSTER)} == set(IDS)


def test_cleanup_removes_everything_of_a_state_dir() -> None:
    path = Path(tempfile.mkdtemp(prefix="slurmpod-localclean-", dir="/var/tmp"))
    try:
        prov = LocalProvider(path)
        prov.launch(request("i-00000000000000g07", cluster="lpdclust0004"))
        found = find_leftovers(path)
        assert any(x.startswith("netns ") for x in found) and any(x.startswith("process ") for x in found)
        assert cleanup(path, dry_run=True) == found
        assert find_leftovers(path) == found
        cleanup(path)
        assert find_leftovers(path) == []
        assert not Path("/run/netns/sp-lpdclust0004-00000g07").exists()
    finally:
        cleanup(path)
        shutil.rmtree(path, ignore_errors=True)


def test_module_teardown_leaves_nothing(state_dir: Path, provider: LocalProvider, nodes: dict) -> None:
    """Runs last in this module: tears the shared cluster down and checks the host is clean."""
    holders = [json.loads((provider.layout.instance(CLUSTER, i) / "meta.json").read_text())["holder_pid"]
               for i in IDS]
    provider.teardown_cluster(CLUSTER)
    assert find_leftovers(state_dir) == []
    assert our_netns(state_dir) == []
    netns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert f"sp-{CLUSTER}" not in netns_list
    for pid in holders:
        try:
            os.kill(pid, 0)
            alive = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
        except ProcessLookupError:
            alive = False
        assert not alive

