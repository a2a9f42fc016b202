"""systemd nodes: an image root filesystem booted with the image's systemd as PID 1 (``nodeinit.py``).

The provider picks this mode for every image that is not the host's own root (``/``, the legacy model).
Here: what decides the mode, the files every boot writes into the root volume (the package proxy's
apt/pip/profile settings), and the wait until systemd finished starting (``is-system-running --wait``).
"""

from __future__ import annotations

import functools
import logging
import subprocess
import time
from pathlib import Path

from slurmpod.providers.base import TemporaryProviderError
from slurmpod.providers.local import netns
from slurmpod.providers.local.pkgproxy import host_ca_bundle, node_proxy_files
from slurmpod.providers.local.registry import node_registry_files
from slurmpod.providers.local.runner import nsenter_argv

log = logging.getLogger("slurmpod.local")

#: how long systemd may take to power a node off (units stop in order) before it is killed
SHUTDOWN_GRACE = 10.0
#: how long a node's systemd may take to finish starting
STARTUP_TIMEOUT = 60.0
#: ``is-system-running`` answers a node may be used in ("degraded": a unit failed; it is logged)
USABLE = ("running", "degraded")
#: systemd's private D-Bus socket (root's systemctl talks to PID 1 through it) and how often its appearance is polled
PRIVATE_SOCKET = "/run/systemd/private"
SOCKET_POLL = 0.005


#: host-wide kernel limits every systemd node draws on (inotify instances are per user, and uid 0 and the image's
#: service users are the same users in every node: at the default 128 instances ~40 nodes exhaust them, their
#: systemd-ask-password path units fail and PID 1 dies). The values container hosts (LXD) document.
HOST_LIMITS = {
    "fs/inotify/max_user_instances": 8192,
    "fs/inotify/max_user_watches": 524288,
    "kernel/keys/maxkeys": 2000,
    "kernel/keys/maxbytes": 2000000,
}
SYSCTL_DIR = Path("/proc/sys")


def raise_host_limits(sysctl_dir: Path = SYSCTL_DIR) -> list[str]:
    """Raises each of ``HOST_LIMITS`` that is lower on this host (never lowers one); returns what changed. A limit
    that cannot be written is logged and left (nodes then boot until it runs out)."""
    changed = []
    for key, want in HOST_LIMITS.items():
        path = sysctl_dir / key
        try:
            have = int(path.read_text().split()[0])
            if have >= want:
                continue
            path.write_text(f"{want}\n")
        except (OSError, ValueError, IndexError) as exc:
            log.warning("cannot raise %s to %d for systemd nodes: %s", key.replace("/", "."), want, exc)
            continue
        changed.append(f"{key.replace('/', '.')} {have} -> {want}")
    if changed:
        log.info("raised host limits for systemd nodes: %s", ", ".join(changed))
    return changed


@functools.lru_cache(maxsize=1)
def host_limits_once() -> None:
    raise_host_limits()


def systemd_image(image_root: str) -> bool:
    """Whether ``image_root`` is an image root filesystem (booted with systemd) rather than the host's ``/``."""
    return Path(image_root).resolve() != Path("/")


@functools.lru_cache(maxsize=1)
def _ca_bundle() -> str | None:
    """The host's CA certificates (~200 KB), read once per process rather than at every node boot."""
    return host_ca_bundle()


def node_files(subnet: str) -> list[list[object]]:
    """``[[node_path, text, mode], ...]`` nodeinit writes at every boot: the package proxy's and the container
    registry's settings."""
    files = node_proxy_files(netns.gateway_ip(subnet), subnet, ca_bundle=_ca_bundle())
    files.update(node_registry_files(netns.gateway_ip(subnet)))
    return [[path, text, 0o644] for path, text in sorted(files.items())]


def wait_started(holder_pid: int, instance_id: str, log_path: Path, timeout: float = STARTUP_TIMEOUT) -> str:
    """Waits until the node's systemd finished starting; returns its state (``running`` or ``degraded``)."""
    argv = [*nsenter_argv(holder_pid), "--", "systemctl", "is-system-running", "--wait"]
    deadline = time.monotonic() + timeout
    # systemctl answers "offline" until PID 1's private socket exists: wait for that on the host side (a stat
    # through the node's root; the caller saw its /run) instead of a command in the node every 10 ms (~14 per
    # node booting under load, each an nsenter and a systemctl)
    private = Path(f"/proc/{holder_pid}/root{PRIVATE_SOCKET}")
    while not private.exists() and time.monotonic() < deadline:
        time.sleep(SOCKET_POLL)
    state = "offline"
    while state in ("offline", ""):  # PID 1 is still nodeinit (about to exec systemd), or its bus is not up yet
        left = deadline - time.monotonic()
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=max(left, 0.1),  # noqa: S603
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise TemporaryProviderError(f"node {instance_id}: systemd did not finish starting within "
                                         f"{timeout:.0f}s") from exc
        state = res.stdout.strip()
        if res.returncode != 0 and res.stderr.startswith("nsenter:"):
            raise TemporaryProviderError(f"node {instance_id} booted but nsenter failed: {res.stderr.strip()}")
        if state in ("offline", ""):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.01)
    if state not in USABLE:
        tail = _tail(log_path)
        raise TemporaryProviderError(f"node {instance_id}: systemd is {state or res.stderr.strip()!r}: {tail}")
    if state == "degraded":
        failed = subprocess.run([*nsenter_argv(holder_pid), "--", "systemctl", "--failed", "--plain",  # noqa: S603
                                 "--no-legend"], capture_output=True, text=True, timeout=10,
                                stdin=subprocess.DEVNULL).stdout.split("\n")
        log.info("node %s is degraded: %s", instance_id, "; ".join(f.split()[0] for f in failed if f.strip()))
    return state


def _tail(path: Path, n: int = 6) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return ""
