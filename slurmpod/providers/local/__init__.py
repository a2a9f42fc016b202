"""The ``local`` provider: each instance is an isolated host (namespaces + overlay root) on this machine."""

from slurmpod.providers.local.cleanup import cleanup, find_leftovers
from slurmpod.providers.local.hostcheck import check_host
from slurmpod.providers.local.provider import LocalProvider

__all__ = ["LocalProvider", "check_host", "cleanup", "find_leftovers"]
