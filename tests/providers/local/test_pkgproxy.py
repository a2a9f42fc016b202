"""The nodes' package proxy (``slurmpod.providers.local.pkgproxy``).

Unit tests: apt-cacher-ng's configuration and the files a node gets. Integration test (root and Debian's
apt-cacher-ng; skipped otherwise): a bridge and a netns of its own (unique names, removed in ``finally``),
the proxy bound to the bridge address, and from inside the netns: apt's registry through the proxy, PyPI
through its CONNECT tunnel, any other HTTPS host refused (403), nothing without the proxy; the proxy listens
on nothing else; restarts, adoption by a new server and its stop never touch a process that is not ours.
Only curl runs inside the netns (it shares the host's filesystem: no apt-get there).
"""

from __future__ import annotations

import configparser
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmpod.providers.local import netns
from slurmpod.providers.local.pkgproxy import (
    ACNG,
    APT_CONF,
    NODE_CA_BUNDLE,
    PASS_THROUGH,
    PIP_CONF,
    PROFILE,
    PackageProxy,
    PackageProxyError,
    ProxyPaths,
    check_bind_address,
    host_ca_bundle,
    node_proxy_files,
    render_config,
)

CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2xh\nc3NpYw==\n-----END CERTIFICATE-----"


# ---- unit ----------------------------------------------------------------------------------------------


def _conf(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.partition(": ")
        out.setdefault(key, []).append(value)
    return out


def test_config_binds_only_the_given_addresses(tmp_path: Path) -> None:
    paths = ProxyPaths.of(tmp_path)
    conf = _conf(render_config(paths, ["10.231.7.1", "10.231.9.1"]))
    assert conf["BindAddress"] == ["10.231.7.1 10.231.9.1"]
    assert conf["Port"] == ["3142"]
    assert conf["ForeGround"] == ["1"]
    assert conf["Remap-debrep"] == ["file:deb_mirror*.gz /debian ; http://deb.debian.org/debian/"]
    assert conf["PassThroughPattern"] == [r"^(pypi\.org|files\.pythonhosted\.org):443$"] == [PASS_THROUGH]
    for key, path in (("CacheDir", paths.cache), ("LogDir", paths.logs), ("PidFile", paths.pid_file)):
        assert conf[key] == [str(path)]
        assert Path(conf[key][0]).is_relative_to(tmp_path.resolve() / "local" / "pkgproxy")


@pytest.mark.parametrize("bad", [[], ["0.0.0.0"], ["127.0.0.1"], ["10.0.0.1", "::"], ["10.0.0.1 10.0.0.2"],
                                 ["localhost"]])
def test_config_never_binds_everything(tmp_path: Path, bad: list[str]) -> None:
    with pytest.raises(ValueError):
        render_config(ProxyPaths.of(tmp_path), bad)


def test_node_files_point_apt_pip_and_shells_at_the_bridge() -> None:
    files = node_proxy_files("10.231.7.1", "10.231.7.0/24")
    assert set(files) == {APT_CONF, PIP_CONF, PROFILE}
    apt = files[APT_CONF]
    assert 'Acquire::http::Proxy "http://10.231.7.1:3142";' in apt
    assert 'Acquire::https::Proxy "http://10.231.7.1:3142";' in apt
    pip = configparser.ConfigParser()
    pip.read_string(files[PIP_CONF])
    assert pip["global"]["proxy"] == "http://10.231.7.1:3142"
    assert "cert" not in pip["global"]
    env = _profile_env(files[PROFILE])
    assert env["http_proxy"] == env["https_proxy"] == env["HTTPS_PROXY"] == "http://10.231.7.1:3142"
    no_proxy = env["no_proxy"].split(",")
    assert {"169.254.169.254", "10.231.7.0/24", "10.231.7.1", "localhost", "127.0.0.1"} <= set(no_proxy)
    assert env["NO_PROXY"] == env["no_proxy"]
    assert "SSL_CERT_FILE" not in env
    assert node_proxy_files("10.231.7.1", "10.231.7.0/24") == files  # pure


def test_node_files_ship_the_ca_bundle_when_given() -> None:
    files = node_proxy_files("10.231.7.1", "10.231.7.0/24", ca_bundle=CERT + "\n")
    assert files[NODE_CA_BUNDLE] == CERT + "\n"
    pip = configparser.ConfigParser()
    pip.read_string(files[PIP_CONF])
    assert pip["global"]["cert"] == NODE_CA_BUNDLE
    env = _profile_env(files[PROFILE])
    assert env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"] == env["CURL_CA_BUNDLE"] == NODE_CA_BUNDLE


@pytest.mark.parametrize("ip, subnet", [("10.231.8.1", "10.231.7.0/24"), ("0.0.0.0", "0.0.0.0/0"),
                                        ("10.231.7.1\nX", "10.231.7.0/24")])
def test_node_files_reject_bad_addresses(ip: str, subnet: str) -> None:
    with pytest.raises(ValueError):
        node_proxy_files(ip, subnet)


def test_host_ca_bundle_keeps_certificates_only(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.crt"
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    bundle.write_text(f"# a comment\n{CERT}\n{key}\r\n{CERT.replace('Q2xh', 'QUJD')}\n")
    text = host_ca_bundle(bundle)
    assert text is not None
    assert text.count("BEGIN CERTIFICATE") == 2 and "PRIVATE" not in text and "comment" not in text
    assert host_ca_bundle(tmp_path / "missing") is None
    (tmp_path / "empty").write_text("nothing here\n")
    assert host_ca_bundle(tmp_path / "empty") is None


def test_check_bind_address() -> None:
    assert check_bind_address("10.1.2.1") == "10.1.2.1"
    for bad in ("0.0.0.0", "127.0.0.1", "224.0.0.1", "10.1.2", "fe80::1"):
        with pytest.raises(ValueError):
            check_bind_address(bad)


def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    proxy = PackageProxy(tmp_path, binary=str(tmp_path / "no-such-apt-cacher-ng"))
    with pytest.raises(PackageProxyError, match="no-such-apt-cacher-ng not found"):
        proxy.ensure("10.254.254.1")
    assert proxy.status() == (0, [])


def test_unknown_pid_in_the_record_is_never_ours(tmp_path: Path) -> None:
    proxy = PackageProxy(tmp_path)
    proxy.paths.root.mkdir(parents=True)
    # this test process: alive, but not an apt-cacher-ng of this state dir
    proxy.paths.record.write_text(json.dumps({"addresses": ["10.254.254.1"], "pid": os.getpid(),
                                              "start": "0", "bound": ["10.254.254.1"]}))
    proxy.paths.run.mkdir()
    proxy.paths.pid_file.write_text(f"{os.getpid()}\n")
    assert proxy.status() == (0, [])
    proxy.close()  # nothing signalled: we are still here


def test_a_proxy_nobody_recorded_is_found_and_stopped(tmp_path: Path) -> None:
    """A server killed between starting apt-cacher-ng and writing its record, before apt-cacher-ng wrote its pid
    file: the process is found by its command line (this state dir's config dir) and stopped by ``close``; another
    state dir's is left alone."""
    procs = []
    for name in ("mine", "other"):
        paths = ProxyPaths.of(tmp_path / name)
        paths.conf_dir.mkdir(parents=True)
        paths.conf.write_text("")  # written before the process starts, as _start does
        # argv[0] "apt-cacher-ng", the config dir among the arguments, as a real one
        procs.append(subprocess.Popen(["bash", "-c", f"exec -a apt-cacher-ng bash -c 'while :; do sleep 0.1; done' "
                                       f"-c {paths.conf_dir} ForeGround=1"]))
    try:
        mine, other = PackageProxy(tmp_path / "mine"), PackageProxy(tmp_path / "other")
        deadline = time.monotonic() + 5
        while mine.status()[0] != procs[0].pid and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mine.status() == (procs[0].pid, [])  # found; the addresses it listens on are unknown
        mine.close()
        assert procs[0].wait(10) is not None
        assert procs[1].poll() is None and other.status()[0] == procs[1].pid
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


def _profile_env(script: str) -> dict[str, str]:
    out = subprocess.run(["sh", "-c", f"{script}\nenv -0"], capture_output=True, timeout=10,
                         env={"PATH": "/usr/bin:/bin"}, check=True).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def gone(pid: int, timeout: float = 5.0) -> bool:
    """``pid`` has exited (and is no zombie left unreaped past ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


# ---- integration ---------------------------------------------------------------------------------------


def _skip_reason() -> str:
    if os.geteuid() != 0:
        return "needs root"
    if not os.access(ACNG, os.X_OK):
        return "Debian's apt-cacher-ng is not installed"
    for tool in ("ip", "ss", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} missing"
    return ""


@dataclass
class Net:
    state: Path
    ns: str
    bridges: list[str]
    subnets: list[str]
    ips: list[str]  # host address per bridge
    node_ip: str
    ca_file: Path


def _free_subnets(n: int) -> list[str]:
    used = [ipaddress.IPv4Network(r["dst"], strict=False) for r in netns.host_routes()
            if r.get("dst") not in (None, "", "default")]
    out: list[str] = []
    for _ in range(200):
        cand = ipaddress.IPv4Network(f"10.{secrets.randbelow(30) + 200}.{secrets.randbelow(250) + 1}.0/24")
        if not any(cand.overlaps(u) for u in used) and str(cand) not in out:
            out.append(str(cand))
            if len(out) == n:
                return out
    pytest.skip("no free /24 for the test bridges")


def _cleanup_net(net: Net, etc_netns_existed: bool) -> None:
    subprocess.run(["ip", "netns", "del", net.ns], capture_output=True, timeout=30)
    for br in net.bridges:
        netns.delete_link(br)
    shutil.rmtree(Path("/etc/netns", net.ns), ignore_errors=True)
    if not etc_netns_existed:
        with contextlib.suppress(OSError):
            Path("/etc/netns").rmdir()  # only if empty


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Net]:
    if reason := _skip_reason():
        pytest.skip(reason)
    tag = secrets.token_hex(4)
    subnets = _free_subnets(2)
    state = tmp_path / "state"
    alias = f"slurmpod-test:{state}"
    n = Net(state=state, ns=f"tpx-{tag}", bridges=[f"tpx{tag}", f"tpy{tag}"], subnets=subnets,
            ips=[netns.gateway_ip(s) for s in subnets], node_ip="", ca_file=tmp_path / "ca.crt")
    etc_netns_existed = Path("/etc/netns").exists()
    try:
        for br, sub in zip(n.bridges, subnets, strict=True):
            netns.ensure_bridge(br, sub, alias)
        n.node_ip = str(ipaddress.IPv4Network(subnets[0]).network_address + 10)
        # like a node: eth0 on the bridge, default route to the (non-forwarding) host, no nameserver
        netns.ensure_instance_net(n.ns, f"tpv{tag}", n.node_ip, subnets[0], n.bridges[0], alias)
        Path("/etc/netns", n.ns).mkdir(parents=True, exist_ok=True)
        Path("/etc/netns", n.ns, "resolv.conf").write_text("# no nameserver: nodes have no DNS\n")
        n.ca_file.write_text(host_ca_bundle() or "")
        yield n
    finally:
        _cleanup_net(n, etc_netns_existed)


def curl(net: Net, *args: str, proxy: bool = True, timeout: int = 40) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", net.ns, "curl", "-sS", "-o", "/dev/null", "--max-time", str(timeout - 10),
            "-w", "%{http_code} %{http_connect} %{time_total}"]
    if proxy:
        argv += ["-x", f"http://{net.ips[0]}:3142"]
    return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def listening(pid: int) -> set[str]:
    """Every TCP address:port ``pid`` listens on (``ss -ltnp``)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10, check=True).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def _kill_ours(proxy: PackageProxy) -> None:
    """Last resort for the finally: the proxy's reset, then any apt-cacher-ng naming our config dir."""
    try:
        proxy.reset()
    finally:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    argv = Path("/proc", entry, "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[0].endswith(b"apt-cacher-ng") and str(proxy.paths.conf_dir).encode() in argv:
                    os.kill(int(entry), 9)


@pytest.mark.integration
def test_proxy_through_a_node_netns(net: Net) -> None:
    proxy = PackageProxy(net.state)
    other = subprocess.Popen(["sleep", "300"])  # a process that is not ours: must survive everything
    try:
        t0 = time.monotonic()
        proxy.ensure(net.ips[0])
        first_start = time.monotonic() - t0
        pid, bound = proxy.status()
        assert pid and bound == [net.ips[0]]
        assert listening(pid) == {f"{net.ips[0]}:3142"}  # only the bridge: no 0.0.0.0, *, 127.0.0.1, ::
        proxy.ensure(net.ips[0])
        assert proxy.status()[0] == pid  # idempotent: no restart

        # apt's registry through the proxy: cached the second time
        url = "http://deb.debian.org/debian/dists/bookworm/Release"
        times = []
        for _ in range(2):
            res = curl(net, url)
            assert res.returncode == 0 and res.stdout.split()[0] == "200", (res.stdout, res.stderr)
            times.append(float(res.stdout.split()[2]))
        # security.debian.org: remapped onto deb.debian.org/debian-security
        res = curl(net, "http://security.debian.org/debian-security/dists/bookworm-security/InRelease")
        assert res.returncode == 0 and res.stdout.split()[0] == "200", (res.stdout, res.stderr)
        # PyPI through the CONNECT tunnel, trusting what the host trusts (the bundle nodes are given)
        res = curl(net, "--cacert", str(net.ca_file), "https://pypi.org/simple/six/")
        assert res.returncode == 0 and res.stdout.split()[:2] == ["200", "200"], (res.stdout, res.stderr)
        # any other HTTPS host: the tunnel is refused
        res = curl(net, "https://github.com/")
        assert res.returncode != 0 and res.stdout.split()[1] == "403", (res.stdout, res.stderr)
        # without the proxy: no DNS, and no route for an address resolved on the host
        res = curl(net, url, proxy=False)
        assert res.returncode != 0, res.stdout
        addr = socket.getaddrinfo("deb.debian.org", 80, socket.AF_INET)[0][4][0]
        res = curl(net, "--connect-timeout", "3", f"http://{addr}/debian/dists/bookworm/Release", proxy=False,
                   timeout=20)
        assert res.returncode != 0 and res.stdout.split()[0] == "000", res.stdout

        # a second bridge: a restart on both addresses; releasing it: a restart on the first only
        proxy.ensure(net.ips[1])
        restart = proxy.last_restart_seconds
        pid2, bound = proxy.status()
        assert pid2 != pid and bound == sorted(net.ips, key=lambda a: ipaddress.IPv4Address(a))
        assert listening(pid2) == {f"{ip}:3142" for ip in net.ips}
        proxy.release(net.ips[1])
        pid3, bound = proxy.status()
        assert bound == [net.ips[0]] and listening(pid3) == {f"{net.ips[0]}:3142"}
        assert curl(net, url).stdout.split()[0] == "200"

        # a crashed server: the proxy it started outlives it, a new server of the state dir reuses it
        proxy.close()
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                        "from slurmpod.providers.local.pkgproxy import PackageProxy; "
                        "PackageProxy(Path(sys.argv[1])).ensure(sys.argv[2])", str(net.state), net.ips[0]],
                       check=True, timeout=60)
        stale, bound = proxy.status()
        assert stale and bound == [net.ips[0]]
        fresh = PackageProxy(net.state)
        fresh.ensure(net.ips[0])
        assert fresh.status()[0] == stale  # reused
        # a record naming a process that is not ours: never signalled; the stale proxy (found by its pid
        # file and command line) is replaced
        rec = json.loads(fresh.paths.record.read_text())
        fresh.paths.record.write_text(json.dumps({**rec, "pid": other.pid}))
        fresh.ensure(net.ips[0])
        replaced, _ = fresh.status()
        assert replaced not in (0, stale, other.pid) and other.poll() is None
        assert gone(stale)

        # clean stop, resume (server start), last release stops it
        fresh.close()
        assert fresh.status() == (0, []) and gone(replaced)
        assert curl(net, url).returncode != 0  # refused: apt/pip report the proxy themselves
        fresh.resume()
        pid4, bound = fresh.status()
        assert pid4 and bound == [net.ips[0]]
        fresh.release(net.ips[0])
        assert fresh.status() == (0, []) and gone(pid4)
        assert other.poll() is None
        print(f"\npkgproxy: first start {first_start:.3f}s, restart {restart:.3f}s; "
              f"Release via proxy: first {times[0]:.3f}s, cached {times[1]:.3f}s")
    finally:
        _kill_ours(proxy)
        other.kill()
        other.wait(timeout=10)
