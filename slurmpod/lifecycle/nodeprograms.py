"""slurmpod's node-side programs (``slurmpod.node``) as boot files: every node gets the programs of the slurmpod
that boots it, whatever its image, with no image rebuild when they change.

* the package's modules under ``/usr/lib/slurmpod/slurmpod_node/``;
* one small executable per program under ``/usr/lib/slurmpod/bin/`` (``ENTRY_POINTS``) that runs it with the
  image's ``python3``;
* systemd units for the node's agents (``UNITS``), enabled by a ``multi-user.target.wants`` link (the boot files
  are written before systemd starts).
"""

from __future__ import annotations

from importlib import resources

from slurmpod.providers.base import NodeFile

PREFIX = "/usr/lib/slurmpod"
PACKAGE_DIR = f"{PREFIX}/slurmpod_node"
BIN = f"{PREFIX}/bin"
#: executable name -> module of slurmpod.node with a ``main() -> int``
ENTRY_POINTS: dict[str, str] = {
    "slurmpod-deep-health-check": "deep_health",
}
#: unit file name -> unit text (enabled on every node that gets the programs)
UNITS: dict[str, str] = {}
_WANTS = "/etc/systemd/system/multi-user.target.wants"

WRAPPER = """#!/usr/bin/python3
# slurmpod node program (written at boot by slurmpod; the code is in {package})
import sys
sys.path.insert(0, "{prefix}")
from slurmpod_node.{module} import main
sys.exit(main())
"""


def modules() -> dict[str, bytes]:
    """File name -> contents of every module of ``slurmpod.node``."""
    pkg = resources.files("slurmpod.node")
    return {entry.name: entry.read_bytes() for entry in sorted(pkg.iterdir(), key=lambda e: e.name)
            if entry.name.endswith(".py") and entry.is_file()}


def program_files() -> list[NodeFile]:
    files = [NodeFile(f"{PACKAGE_DIR}/{name}", content, 0o644) for name, content in modules().items()]
    for exe, module in sorted(ENTRY_POINTS.items()):
        files.append(NodeFile(f"{BIN}/{exe}", WRAPPER.format(package=PACKAGE_DIR, prefix=PREFIX,
                                                              module=module).encode(), 0o755))
    for unit, text in sorted(UNITS.items()):
        files.append(NodeFile(f"/etc/systemd/system/{unit}", text.encode(), 0o644))
        files.append(NodeFile(f"{_WANTS}/{unit}", link=f"/etc/systemd/system/{unit}"))
    return files
