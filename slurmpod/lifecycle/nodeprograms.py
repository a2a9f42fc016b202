"""slurmpod's node-side programs (``slurmpod.node``) as boot files: every node gets the programs of the slurmpod
that boots it, whatever its image, with no image rebuild when they change.

* the package's modules under ``/usr/lib/slurmpod/slurmpod_node/``;
* one small executable per program under ``/usr/lib/slurmpod/bin/`` (``ENTRY_POINTS``) that runs it with the
  image's ``python3``;
* systemd units for the node's agents (``UNITS``), enabled by a ``.wants`` link of the unit that pulls them in
  (the health agent: slurmd's).
"""

from __future__ import annotations

import json
from importlib import resources

from slurmpod.providers.base import NodeFile

PREFIX = "/usr/lib/slurmpod"
PACKAGE_DIR = f"{PREFIX}/slurmpod_node"
BIN = f"{PREFIX}/bin"
#: executable name -> module of slurmpod.node with a ``main() -> int``
ENTRY_POINTS: dict[str, str] = {
    "slurmpod-health": "health_agent",
    "slurmpod-fault": "fault",
    "auto-resume": "auto_resume",  # exec'd by the SPANK plugin for srun --auto-resume=1
    "slurmpod-deep-health-check": "deep_health",
    "slurmpod-container": "container",  # run by the containers SPANK plugin (srun --container-image)
}
HEALTH_CONFIG = "/etc/slurmpod/health.json"  # health_agent.CONFIG_FILE: only compute nodes get it
#: The agent starts with slurmd (a ``slurmd.service.wants`` link, after it): what it watches is a node in Slurm, and a
#: compute node's slurmd starts after its lifecycle scripts, not at boot (its passes before that found no slurmd).
#: It stays up when slurmd stops or dies: that is a fault it reports.
HEALTH_UNIT = f"""[Unit]
Description=slurmpod health monitoring agent (HyperPod's HMA): marks a faulty node Action:Replace/Reboot in Slurm
After=munge.service slurmd.service
ConditionPathExists={HEALTH_CONFIG}

[Service]
ExecStart={BIN}/slurmpod-health
Restart=always
RestartSec=5
Nice=10

[Install]
WantedBy=slurmd.service
"""
#: unit file name -> (unit text, the unit whose start pulls it in)
UNITS: dict[str, tuple[str, str]] = {
    "slurmpod-health.service": (HEALTH_UNIT, "slurmd.service"),
}

#: ``-IS`` (isolated, no site): the programs are standard library only, so no site-packages scan, .pth files or
#: user site at each start (the health agent starts at every compute node's boot). One word: the kernel passes
#: everything after the interpreter as a single argument ("-I -S" makes python3 fail with "Unknown option: - ")
WRAPPER = """#!/usr/bin/python3 -IS
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


def health_config(*, interval: float = 2.0, rpc_interval: float = 30.0) -> NodeFile:
    """The health agent's configuration (a compute node's boot file: the agent runs where it exists)."""
    data = {"interval": interval, "rpc_interval": rpc_interval, "compute": True}
    return NodeFile(HEALTH_CONFIG, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), 0o644)


def program_files() -> list[NodeFile]:
    files = [NodeFile(f"{PACKAGE_DIR}/{name}", content, 0o644) for name, content in modules().items()]
    for exe, module in sorted(ENTRY_POINTS.items()):
        files.append(NodeFile(f"{BIN}/{exe}", WRAPPER.format(package=PACKAGE_DIR, prefix=PREFIX,
                                                              module=module).encode(), 0o755))
    for unit, (text, wanted_by) in sorted(UNITS.items()):
        files.append(NodeFile(f"/etc/systemd/system/{unit}", text.encode(), 0o644))
        files.append(NodeFile(f"/etc/systemd/system/{wanted_by}.wants/{unit}", link=f"/etc/systemd/system/{unit}"))
    return files
