"""Packages for lifecycle scripts: one apt-cacher-ng per state dir, bound only to its cluster bridges.

Nodes have no route off the machine and no DNS. ``apt-get`` and ``pip`` inside a node reach Debian's and
PyPI's registries through Debian's ``apt-cacher-ng`` on the host side, listening on port 3142 of the host's
address on each cluster bridge (the subnet's ``.1``) and on nothing else: never ``0.0.0.0``, never loopback.
The proxy resolves names and opens the connections; apt's plain-HTTP downloads are cached, PyPI is a
CONNECT tunnel (``PassThroughPattern``: pypi.org and files.pythonhosted.org port 443 only; every other
CONNECT answers 403). A registry the proxy cannot reach gives apt/pip their own errors (apt: ``503``/
``Received HTTP code 403 from proxy after CONNECT``; pip: ``ProxyError ... 403``).

Lifecycle (``PackageProxy``): ``ensure(ip)`` adds a bridge address, ``release(ip)`` removes it, ``close()``
stops the process and keeps the address list, ``resume()`` restarts it for the listed addresses still on
the host (a server that stopped cleanly), ``reset()`` stops it and forgets them (``slurmpod cleanup``).
apt-cacher-ng cannot add a listening address at run time, so a change of the address set is a restart
(about 20-40 ms here; apt and pip retry a download cut by it). With no address left the process is stopped:
an empty ``BindAddress`` would make it listen on every interface.

The process runs in the foreground in its own session, so it outlives a crashed server; the next server of
the same state dir finds it by its record (PID + start time) or apt-cacher-ng's pid file, and a
``/proc/PID/cmdline`` naming this state dir's config dir, then reuses it (same addresses) or replaces it.
A process that is not ours is never signalled.

It runs as root: nodes are root in the host's user namespace (they are no security boundary), and the
proxy is reachable only from this state dir's bridges. Files (``<state_dir>/local/pkgproxy/``, hidden from
nodes like the rest of the state dir)::

    conf/acng.conf     the whole configuration (``-c conf``: the host's /etc/apt-cacher-ng is not read)
    cache/             the download cache: per state dir, never shared (two apt-cacher-ng processes must not
                       write one cache); it survives restarts and ``close``, and goes with the state dir
    log/               apt-cacher.log/.err and stdout.log
    run/acng.pid       apt-cacher-ng's own pid file; run/socket its local control socket
    proxy.json         {"addresses": wanted, "pid", "start", "bound": what the running process listens on}
    lock               flock serialising servers, CLIs and threads of this state dir

Node side: ``node_proxy_files`` (a pure function) renders what a node's root needs; ``host_ca_bundle``
reads the certificates the host trusts, to be shipped with it (see there why).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmpod.providers.local.commands import host_run
from slurmpod.providers.local.priority import at_host_priority
from slurmpod.providers.local.procscan import ProcFS
from slurmpod.providers.local.state import file_lock, read_json, write_json

log = logging.getLogger("slurmpod.pkgproxy")

PORT = 3142
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; some margin
SHORT_SOCKET_DIR = Path("/run/slurmpod/pkgproxy")  # control sockets of proxies whose state dir is too deep
ACNG = "/usr/sbin/apt-cacher-ng"
#: Debian's stock backend for ``debrep`` is a mirror list that answered every request with HTTP 503
DEBREP_REMAP = "file:deb_mirror*.gz /debian ; http://deb.debian.org/debian/"
#: security.debian.org and its aliases are one cache, fetched from deb.debian.org (reachable where Debian is)
SECDEB_REMAP = "security.debian.org security.debian.org/debian-security deb.debian.org/debian-security ; " \
               "deb.debian.org/debian-security"
PASS_THROUGH = r"^(pypi\.org|files\.pythonhosted\.org):443$"
SUPPORT_DIR = "/usr/lib/apt-cacher-ng"
IMDS_IP = "169.254.169.254"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
NODE_CA_BUNDLE = "/etc/slurmpod/ca-certificates.crt"
APT_CONF = "/etc/apt/apt.conf.d/01slurmpod-proxy"
PIP_CONF = "/etc/pip.conf"
PROFILE = "/etc/profile.d/slurmpod-proxy.sh"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----")


class PackageProxyError(RuntimeError):
    """The package proxy could not be started or stopped; the message says why."""


# ---- configuration (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyPaths:
    """Where one state dir's proxy keeps its files (see the module doc)."""

    root: Path

    @classmethod
    def of(cls, state_dir: Path) -> ProxyPaths:
        return cls(Path(state_dir).resolve() / "local" / "pkgproxy")

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    @property
    def conf(self) -> Path:
        return self.conf_dir / "acng.conf"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def stdout(self) -> Path:
        return self.logs / "stdout.log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pid_file(self) -> Path:
        return self.run / "acng.pid"

    @property
    def socket(self) -> Path:
        """apt-cacher-ng's control socket: ``run/socket``, or under /run when that path is too long for a Unix
        socket (108 bytes with its NUL; a deep state dir, e.g. a test's tmp path, would stop the proxy)."""
        inside = self.run / "socket"
        if len(os.fsencode(inside)) < SOCKET_PATH_MAX:
            return inside
        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]
        return SHORT_SOCKET_DIR / f"{digest}.sock"

    @property
    def record(self) -> Path:
        return self.root / "proxy.json"

    @property
    def lock(self) -> Path:
        return self.root / "lock"


def check_bind_address(ip: str) -> str:
    """``ip`` as a canonical IPv4 address a proxy may bind to; ValueError for wildcard, loopback, garbage."""
    addr = ipaddress.IPv4Address(ip)
    if addr.is_unspecified or addr.is_loopback or addr.is_multicast:
        raise ValueError(f"the package proxy must not listen on {ip}")
    return str(addr)


def render_config(paths: ProxyPaths, addresses: list[str], port: int = PORT) -> str:
    """apt-cacher-ng's whole configuration, listening on ``addresses`` only (never empty: that means all)."""
    bind = [check_bind_address(a) for a in addresses]
    if not bind:
        raise ValueError("the package proxy needs at least one address to listen on")
    return "".join(f"{key}: {value}\n" for key, value in (
        ("CacheDir", paths.cache),
        ("SupportDir", SUPPORT_DIR),  # mirror lists (deb_mirror*.gz), report templates
        ("LogDir", paths.logs),
        ("PidFile", paths.pid_file),
        ("SocketPath", paths.socket),
        ("Port", port),
        ("BindAddress", " ".join(bind)),
        ("ForeGround", 1),
        ("Remap-debrep", DEBREP_REMAP),
        ("Remap-secdeb", SECDEB_REMAP),
        ("PassThroughPattern", PASS_THROUGH),
        ("ReportPage", ""),  # no maintenance web page for the nodes
        ("ExThreshold", 4),
        ("NetworkTimeout", 30),
        ("VerboseLog", 1),
    ))


# ---- node side (pure) ----------------------------------------------------------------------------------


def host_ca_bundle(path: Path = HOST_CA_BUNDLE) -> str | None:
    """The PEM certificates of ``path`` (only ``CERTIFICATE`` blocks: anything else is dropped), or None.

    Why nodes get the host's trust: pip's CONNECT tunnel reaches PyPI as the host would, so a network that
    intercepts TLS (this sandbox, corporate proxies) presents a certificate only the host's bundle trusts.
    The host's bundle is Debian's Mozilla set plus what its operator added on purpose; public certificates
    only, so shipping it leaks nothing, and a node trusts exactly what its control plane trusts."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    certs = _PEM_CERT.findall(text)
    return "\n".join(c.replace("\r\n", "\n") for c in certs) + "\n" if certs else None


def node_proxy_files(bridge_ip: str, subnet: str, *, ca_bundle: str | None = None,
                     port: int = PORT) -> dict[str, str]:
    """Files (absolute path in the node's root -> content) that make apt, pip and other tools of a node use
    the package proxy at ``bridge_ip:port``, with no DNS and no route. Pure: the caller writes them.

    ``ca_bundle`` (``host_ca_bundle()``): shipped as ``NODE_CA_BUNDLE`` and named by pip.conf and the
    profile's ``SSL_CERT_FILE``/``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``. The image's own
    ``/etc/ssl/certs`` is left alone (its ca-certificates package owns it)."""
    ip = check_bind_address(bridge_ip)
    net = ipaddress.IPv4Network(subnet, strict=False)
    if ipaddress.IPv4Address(ip) not in net:
        raise ValueError(f"bridge address {ip} is not in subnet {net}")
    url = f"http://{ip}:{port}"
    no_proxy = ",".join(("localhost", "127.0.0.1", "::1", IMDS_IP, str(net), ip))
    header = "written by slurmpod at every boot: the host's package proxy on the cluster bridge"
    files = {
        APT_CONF: (f"// {header}\n"
                   f'Acquire::http::Proxy "{url}";\n'
                   "// https sources: a CONNECT through the proxy, refused (403) unless it is a PyPI host\n"
                   f'Acquire::https::Proxy "{url}";\n'
                   'Acquire::Retries "3";\n'),
        PIP_CONF: (f"# {header}\n[global]\nproxy = {url}\n"
                   + (f"cert = {NODE_CA_BUNDLE}\n" if ca_bundle else "")),
    }
    profile = [f"# {header}",
               f"export http_proxy={url} https_proxy={url} no_proxy={no_proxy}",
               'export HTTP_PROXY="$http_proxy" HTTPS_PROXY="$https_proxy" NO_PROXY="$no_proxy"']
    if ca_bundle:
        files[NODE_CA_BUNDLE] = ca_bundle
        profile.append(f"export SSL_CERT_FILE={NODE_CA_BUNDLE} REQUESTS_CA_BUNDLE={NODE_CA_BUNDLE} "
                       f"CURL_CA_BUNDLE={NODE_CA_BUNDLE}")
    files[PROFILE] = "\n".join(profile) + "\n"
    return files


# ---- the process ---------------------------------------------------------------------------------------


@dataclass
class _Record:
    addresses: list[str] = field(default_factory=list)  # wanted: bridge addresses in use
    pid: int = 0
    start: str = ""
    bound: list[str] = field(default_factory=list)  # what the running process listens on


def _proc_start(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time), or None when gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def _proc_argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def host_addresses() -> set[str]:
    """IPv4 addresses assigned on this host (its network namespace)."""
    out = host_run(["ip", "-j", "-4", "addr", "show"], timeout=10).stdout
    return {a["local"] for i in (json.loads(out) if out.strip() else []) for a in i.get("addr_info", [])
            if a.get("local")}


class PackageProxy:
    """One apt-cacher-ng of a state dir (see the module doc). Every method is idempotent and safe to call
    from several threads and processes of the same state dir."""

    def __init__(self, state_dir: Path, *, port: int = PORT, binary: str = ACNG) -> None:
        self.paths = ProxyPaths.of(state_dir)
        self.port = port
        self.binary = binary
        self.last_restart_seconds = 0.0  # duration of the last (re)start or stop, for benchmarks and logs
        self._child: subprocess.Popen[bytes] | None = None

    # ---- interface

    def ensure(self, bridge_ip: str) -> None:
        """The proxy listens on ``bridge_ip`` (an address of this host), starting or restarting it if needed."""
        ip = check_bind_address(bridge_ip)
        self._check_binary()
        with self._locked() as rec:
            if ip not in rec.addresses:
                rec.addresses.append(ip)
            pid = self._running(rec)
            if pid and ip in rec.bound:
                return
            present = host_addresses()
            if ip not in present:
                raise PackageProxyError(f"package proxy: {ip} is not an address of this host")
            self._restart(rec, pid, present)

    def release(self, bridge_ip: str) -> None:
        """Stops listening on ``bridge_ip``; stops the process when no address is left."""
        ip = check_bind_address(bridge_ip)
        with self._locked() as rec:
            if ip in rec.addresses:
                rec.addresses.remove(ip)
            pid = self._running(rec)
            if pid and ip in rec.bound:
                self._restart(rec, pid, host_addresses())

    def resume(self) -> None:
        """After a clean stop: listens again on the recorded addresses still present (no-op when running)."""
        with self._locked() as rec:
            pid = self._running(rec)
            if rec.addresses and not (pid and set(rec.bound) == set(rec.addresses)):
                self._restart(rec, pid, host_addresses())

    def close(self) -> None:
        """Stops the process (ours only); the address list stays for ``resume``."""
        self._halt(forget=False)

    def reset(self) -> None:
        """``close`` and forget every address (the state dir's clusters are gone)."""
        self._halt(forget=True)

    def _halt(self, *, forget: bool) -> None:
        if not self._exists():
            return
        with self._locked() as rec:
            pid = self._running(rec)
            if pid:
                self._stop(pid, rec.start)
            rec.pid, rec.start, rec.bound = 0, "", []
            if forget:
                rec.addresses = []

    def status(self) -> tuple[int, list[str]]:
        """(PID, addresses it listens on) of the running proxy, or (0, []). Creates nothing."""
        if not self._exists():
            return 0, []
        with self._locked() as rec:
            pid = self._running(rec)
            return (pid, list(rec.bound)) if pid else (0, [])

    # ---- internals

    def _exists(self) -> bool:
        """This state dir ever had a proxy (``close``/``reset``/``status`` create nothing otherwise)."""
        return self.paths.record.exists() or self.paths.pid_file.exists() or self.paths.conf.exists()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_Record]:
        """The record under the state dir's proxy lock; written back when the block succeeds."""
        with file_lock(self.paths.lock):
            data = read_json(self.paths.record, {})
            rec = _Record(**{k: v for k, v in data.items() if k in _Record.__dataclass_fields__})
            before = asdict(rec)
            yield rec
            if asdict(rec) != before:
                write_json(self.paths.record, asdict(rec))

    def _ours(self, pid: int, start: str | None = None) -> bool:
        """``pid`` is a live apt-cacher-ng started with this state dir's config dir (and ``start``, if given)."""
        if pid <= 0:
            return False
        now = _proc_start(pid)
        if now is None or (start is not None and now != start):
            return False
        argv = _proc_argv(pid)
        return bool(argv) and os.path.basename(argv[0]) == "apt-cacher-ng" and str(self.paths.conf_dir) in argv

    def _running(self, rec: _Record) -> int:
        """PID of this state dir's live proxy. The record is trusted only with its start time; apt-cacher-ng's
        pid file (a stale process whose record was lost) only with the cmdline check, and then its addresses
        are unknown (``bound`` = []), so the caller replaces it."""
        if self._child is not None and self._child.poll() is not None:
            self._child = None  # reaped
        if self._ours(rec.pid, rec.start):
            return rec.pid
        rec.pid, rec.start, rec.bound = 0, "", []
        try:
            pid = int(self.paths.pid_file.read_text().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if not self._ours(pid):
            # a proxy started by a server killed before its record and apt-cacher-ng's pid file were written: found
            # by its command line (this state dir's config dir), else it would hold the address forever
            pid = next((p for p in ProcFS().pids() if self._ours(p)), 0)
        if pid:
            rec.pid, rec.start = pid, _proc_start(pid) or ""
            return pid
        return 0

    def _restart(self, rec: _Record, pid: int, present: set[str]) -> None:
        """Stops ``pid`` (if any) and starts the proxy on the wanted addresses present on the host."""
        t0 = time.monotonic()
        gone = [a for a in rec.addresses if a not in present]
        if gone:
            log.info("package proxy: %s no longer on this host, dropped", ", ".join(gone))
        rec.addresses = [a for a in rec.addresses if a in present]
        if pid:
            self._stop(pid, rec.start)
            rec.pid, rec.start, rec.bound = 0, "", []
        if rec.addresses:
            self._start(rec)
        self.last_restart_seconds = time.monotonic() - t0
        log.info("package proxy %s in %.3fs", f"on {' '.join(rec.bound)}:{self.port}" if rec.bound else "stopped",
                 self.last_restart_seconds)

    def _check_binary(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise PackageProxyError(f"package proxy: {self.binary} not found (install Debian's apt-cacher-ng)")

    def _start(self, rec: _Record) -> None:
        self._check_binary()
        bind = sorted(rec.addresses, key=lambda a: int(ipaddress.IPv4Address(a)))
        for d in (self.paths.conf_dir, self.paths.cache, self.paths.logs, self.paths.run, self.paths.socket.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.paths.pid_file.unlink(missing_ok=True)
        self.paths.conf.write_text(render_config(self.paths, bind, self.port))
        with open(self.paths.stdout, "ab") as out:
            out.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} start on {' '.join(bind)}\n".encode())
            out.flush()
            child = subprocess.Popen(
                at_host_priority([self.binary, "-c", str(self.paths.conf_dir), "ForeGround=1"]),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self.paths.root,
                start_new_session=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
        self._child = child
        rec.pid, rec.start = child.pid, _proc_start(child.pid) or ""
        try:
            self._wait_listening(child, bind)
        except BaseException:
            self._stop(child.pid, None)
            rec.pid, rec.start = 0, ""
            raise
        rec.bound = bind

    def _wait_listening(self, child: subprocess.Popen[bytes], bind: list[str]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        waiting = list(bind)
        while waiting:
            if child.poll() is not None:
                raise PackageProxyError(f"package proxy exited ({child.returncode}) on start: {self._tail()}")
            try:
                with socket.create_connection((waiting[0], self.port), timeout=0.5):
                    waiting.pop(0)
                    continue
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise PackageProxyError(f"package proxy not listening on {waiting[0]}:{self.port} after "
                                        f"{START_TIMEOUT:.0f}s: {self._tail()}")
            time.sleep(0.01)

    def _tail(self) -> str:
        try:
            lines = self.paths.stdout.read_text(errors="replace").splitlines()[-5:]
        except OSError:
            return "(no output)"
        text = " | ".join(line for line in lines if not line.startswith("== ")) or "(no output)"
        if "in use" in text:
            text += " (another proxy holds the port: is Debian's apt-cacher-ng service running?)"
        return text

    def _stop(self, pid: int, start: str | None) -> None:
        """SIGTERM, bounded wait, SIGKILL: through a pidfd, after checking the process is ours."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            if not self._ours(pid, start or None):
                return  # gone meanwhile, or not ours: never signalled
            for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, STOP_TIMEOUT)):
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, sig)
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                if poller.poll(wait * 1000):
                    break
            else:
                raise PackageProxyError(f"package proxy {pid} survived SIGKILL")
        finally:
            os.close(fd)
            if self.paths.socket.parent == SHORT_SOCKET_DIR:
                self.paths.socket.unlink(missing_ok=True)
            if self._child is not None and self._child.pid == pid:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._child.wait(timeout=STOP_TIMEOUT)
                self._child = None
