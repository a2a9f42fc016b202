"""The host-side services every cluster bridge gets: the package proxy (``pkgproxy.py``) and the container
registry (``registry.py``), each listening on the host's address on the bridge (the subnet's ``.1``) only.

A failure (e.g. apt-cacher-ng or docker-registry not installed) is logged once, never a failed launch: the
nodes' apt/pip/podman then report the refused connection themselves.
"""

from __future__ import annotations

import logging
from pathlib import Path

from slurmpod.providers.base import ProviderError
from slurmpod.providers.local import netns
from slurmpod.providers.local.pkgproxy import PackageProxy, PackageProxyError
from slurmpod.providers.local.registry import ContainerRegistry, RegistryError

log = logging.getLogger("slurmpod.local")
_ERRORS = (PackageProxyError, RegistryError, ProviderError, OSError, ValueError)


class BridgeServices:
    """The package proxy and the container registry of one state dir (shared by every provider object of it)."""

    def __init__(self, state_dir: Path) -> None:
        self.pkgproxy = PackageProxy(state_dir)
        self.registry = ContainerRegistry(state_dir)
        self._warned: set[str] = set()

    def _each(self) -> tuple[tuple[str, PackageProxy | ContainerRegistry], ...]:
        return (("package proxy", self.pkgproxy), ("container registry", self.registry))

    def ensure(self, subnet: str) -> None:
        """Both listen on the cluster bridge of ``subnet``."""
        for name, service in self._each():
            try:
                service.ensure(netns.gateway_ip(subnet))
            except _ERRORS as exc:
                if str(exc) not in self._warned:
                    self._warned.add(str(exc))
                    log.warning("%s unavailable for %s: %s", name, subnet, exc)

    def release(self, subnet: str) -> None:
        for name, service in self._each():
            try:
                service.release(netns.gateway_ip(subnet))
            except _ERRORS as exc:
                log.warning("%s: releasing %s failed: %s", name, subnet, exc)

    def resume(self) -> None:
        """Server start: both listen again on the bridges of the clusters that exist (a server that stopped
        cleanly stopped them; one that crashed left them running, and they are reused)."""
        for name, service in self._each():
            try:
                service.resume()
            except _ERRORS as exc:
                log.warning("%s unavailable: %s", name, exc)

    def close(self) -> None:
        """Server stop: both stop (the nodes keep running; ``resume`` serves them again)."""
        for _, service in self._each():
            service.close()
