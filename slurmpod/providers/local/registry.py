"""The cluster's container registry: Debian's ``docker-registry`` (the CNCF Distribution registry), per state dir.

``srun --container-image=IMAGE:TAG`` on a node resolves registry-less images against it; ``slurmpod containers
import`` pushes there from the host, ``podman push``/``docker push`` from a node. Nodes reach only this machine,
so the registry listens on the host's address on each cluster bridge (the subnet's ``.1``, port 5000) and on
nothing else (never ``0.0.0.0``, never loopback). docker-registry binds one address, so there is one process
per bridge address, all serving the same storage (the registry supports several instances on one filesystem).

Lifecycle as the package proxy's (``pkgproxy.py``): ``ensure(ip)`` when a cluster's bridge comes up,
``release(ip)`` when it goes, ``close()`` at server stop (addresses kept), ``resume()`` at server start,
``reset()`` in ``slurmpod cleanup``. Processes run in their own session (they outlive a crashed server) and are
found again by PID + start time; a process that is not ours is never signalled. One a server started but did not
live to record (killed between the fork and the write of ``registry.json``) is found by its command line
(``docker-registry serve <this state dir's conf/IP.yml>``) and adopted, or stopped by ``close``/``reset``.
Images survive restarts.

Files (``<state_dir>/local/registry/``, hidden from nodes like the rest of the state dir)::

    conf/<ip>.yml   one process's configuration    data/   the images (shared)
    log/<ip>.log    its output                     registry.json  {"addresses", "procs": {ip: [pid, start]}}
    lock            flock serialising servers, CLIs and threads of this state dir
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slurmpod.providers.local.pkgproxy import check_bind_address, host_addresses
from slurmpod.providers.local.priority import at_host_priority
from slurmpod.providers.local.procscan import ProcFS
from slurmpod.providers.local.state import file_lock, read_json, write_json

BINARY = "/usr/bin/docker-registry"
PORT = 5000
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
CONFIG = """# written by slurmpod: the cluster's container registry on {ip} (one process per cluster bridge)
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {data}
  delete:
    enabled: true
http:
  addr: {ip}:{port}
  headers:
    X-Content-Type-Options: [nosniff]
"""


class RegistryError(RuntimeError):
    """The registry could not be started or stopped; the message says why."""


def _proc_start(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


def _listening(ip: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=0.5):
        return True
    return False


class ContainerRegistry:
    """The state dir's registry processes (see the module doc); every method is idempotent."""

    def __init__(self, state_dir: Path, *, port: int = PORT, binary: str = BINARY) -> None:
        self.dir = Path(state_dir) / "local" / "registry"
        self.port = port
        self.binary = binary

    @property
    def available(self) -> bool:
        return os.access(self.binary, os.X_OK)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / "lock"):
            rec: dict[str, Any] = read_json(self.dir / "registry.json", None) or {"addresses": [], "procs": {}}
            yield rec
            write_json(self.dir / "registry.json", rec)

    def _alive(self, rec: dict[str, Any], ip: str, serving: dict[str, list[int]] | None = None, *,
               adopt_only: bool = False) -> int | None:
        """The live process serving ``ip``: the recorded one, else one found by its command line (``serving``, or
        a scan of /proc now), adopted into ``rec``; any further one is stopped unless ``adopt_only``."""
        pid, start = rec["procs"].get(ip, [0, ""])
        if pid and _proc_start(pid) == start:
            return int(pid)
        rec["procs"].pop(ip, None)
        found = (self._serving() if serving is None else serving).get(ip, [])
        for extra in [] if adopt_only else found[1:]:
            self._kill(extra)
        if not found:
            return None
        rec["procs"][ip] = [found[0], _proc_start(found[0]) or ""]
        return found[0]

    def _serving(self) -> dict[str, list[int]]:
        """Address -> PIDs of the live processes serving this state dir's configurations (one scan of /proc)."""
        conf_dir = str(self.dir / "conf") + "/"
        proc = ProcFS()
        out: dict[str, list[int]] = {}
        for pid in proc.pids():
            argv = proc.argv(pid)[-3:]  # (the last three arguments: a script interpreter may come first)
            if len(argv) == 3 and argv[:2] == [self.binary, "serve"] and argv[2].startswith(conf_dir) \
                    and argv[2].endswith(".yml") and _proc_start(pid) is not None:
                out.setdefault(argv[2][len(conf_dir):-len(".yml")], []).append(pid)
        return out

    def ensure(self, bridge_ip: str) -> None:
        ip = check_bind_address(bridge_ip)
        if not self.available:
            raise RegistryError(f"{self.binary} is missing (apt-get install docker-registry)")
        with self._locked() as rec:
            if ip not in rec["addresses"]:
                rec["addresses"].append(ip)
            if self._alive(rec, ip):
                return
            self._start(rec, ip)

    def release(self, bridge_ip: str) -> None:
        ip = check_bind_address(bridge_ip)
        with self._locked() as rec:
            if ip in rec["addresses"]:
                rec["addresses"].remove(ip)
            self._stop(rec, ip)

    def resume(self) -> None:
        if not self.available or not (self.dir / "registry.json").exists():
            return
        with self._locked() as rec:
            present = host_addresses()
            for ip in rec["addresses"]:
                if ip in present and not self._alive(rec, ip):
                    self._start(rec, ip)

    def close(self) -> None:
        if not (self.dir / "conf").is_dir():  # never started here (creates nothing)
            return
        with self._locked() as rec:
            serving = self._serving()
            for ip in sorted(set(rec["procs"]) | set(serving)):
                self._stop(rec, ip, serving)

    def reset(self) -> None:
        self.close()
        if (self.dir / "conf").is_dir():
            with self._locked() as rec:
                rec["addresses"] = []

    def status(self) -> list[tuple[str, int]]:
        """(address, pid) of each running process."""
        rec = read_json(self.dir / "registry.json", None) or {"procs": {}}
        if not (self.dir / "conf").is_dir():
            return []
        serving = self._serving()
        running = {ip: self._alive(rec, ip, serving, adopt_only=True) for ip in set(rec["procs"]) | set(serving)}
        return [(ip, pid) for ip, pid in sorted(running.items()) if pid]

    def address(self) -> str | None:
        """``IP:PORT`` of a running registry process (what the host pushes to), or None."""
        up = self.status()
        return f"{up[0][0]}:{self.port}" if up else None

    def _start(self, rec: dict[str, Any], ip: str) -> None:
        ipaddress.IPv4Address(ip)
        for sub in ("conf", "data", "log"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        conf = self.dir / "conf" / f"{ip}.yml"
        conf.write_text(CONFIG.format(ip=ip, port=self.port, data=self.dir / "data"))
        with open(self.dir / "log" / f"{ip}.log", "ab") as out:
            out.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} start on {ip}:{self.port}\n".encode())
            out.flush()
            child = subprocess.Popen(at_host_priority([self.binary, "serve", str(conf)]),  # noqa: S603
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                     close_fds=True)
        # recorded before the wait for its port: a server killed meanwhile left a registry nobody knew, which
        # neither the next server nor `slurmpod cleanup` stopped
        rec["procs"][ip] = [child.pid, _proc_start(child.pid) or ""]
        write_json(self.dir / "registry.json", rec)
        deadline = time.monotonic() + START_TIMEOUT
        while not _listening(ip, self.port):
            if child.poll() is not None or time.monotonic() > deadline:
                with contextlib.suppress(OSError):
                    child.kill()
                child.wait(timeout=STOP_TIMEOUT)
                rec["procs"].pop(ip, None)
                write_json(self.dir / "registry.json", rec)
                tail = (self.dir / "log" / f"{ip}.log").read_text(errors="replace").strip().splitlines()[-3:]
                raise RegistryError(f"container registry on {ip}:{self.port} did not start: {' | '.join(tail)}")
            time.sleep(0.05)

    def _stop(self, rec: dict[str, Any], ip: str, serving: dict[str, list[int]] | None = None) -> None:
        pid = self._alive(rec, ip, serving)
        rec["procs"].pop(ip, None)
        if pid:
            self._kill(pid)

    @staticmethod
    def _kill(pid: int) -> None:
        """SIGTERM, a bounded wait, SIGKILL (the caller checked the process is ours)."""
        start = _proc_start(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while _proc_start(pid) == start and start is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)


def node_registry_files(bridge_ip: str, port: int = PORT) -> dict[str, str]:
    """Files (node path -> content) that point a node's podman, Docker and ``slurmpod-container`` at the
    cluster's registry (plain HTTP on the bridge: no TLS, no names). Pure: the caller writes them."""
    where = f"{check_bind_address(bridge_ip)}:{port}"
    header = "written by slurmpod at every boot: the cluster's container registry on the bridge"
    return {
        "/etc/slurmpod/registry": f"{where}\n",
        "/etc/containers/registries.conf.d/50-slurmpod.conf": (
            f"# {header}\nunqualified-search-registries = [\"{where}\"]\n\n"
            f"[[registry]]\nlocation = \"{where}\"\ninsecure = true\n"),
        "/etc/docker/daemon.json": (
            '{\n  "insecure-registries": ["' + where + '"],\n  "data-root": "/var/lib/docker",\n'
            '  "log-driver": "local"\n}\n'),
    }
