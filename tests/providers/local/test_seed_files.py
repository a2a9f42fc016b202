"""A new root volume's files (``InstanceRequest.files``) are in place when the node's systemd starts, with the
image's owners; the seed file with their contents never stays on the host; the node's routes have no delayed ACKs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmpod.providers.base import InstanceRequest, NodeFile
from slurmpod.providers.local.cleanup import cleanup_report, find_leftovers
from slurmpod.providers.local.holder import SEED_FILE
from slurmpod.providers.local.provider import LocalProvider
from tests.providers.local.images import default_root

KEY = bytes(range(256)) * 4  # binary, like a munge key


@pytest.mark.integration
def test_seeded_files_are_there_at_first_boot(tmp_path: Path) -> None:
    root = default_root()
    if os.geteuid() != 0 or root is None:
        pytest.skip("needs root and the default image (scripts/install.sh)")
    provider = LocalProvider(tmp_path)
    files = (
        NodeFile("/etc/munge/munge.key", KEY, 0o400, "munge"),
        NodeFile("/etc/slurmpod/deep/nested/conf", b"a=1\n", 0o640, "root:slurm"),
        NodeFile("/etc/systemd/system/multi-user.target.wants/slurmdbd.service",
                 link="/etc/systemd/system/slurmdbd.service"),
    )
    req = InstanceRequest(cluster_id="seedc1", instance_id="i-05eed00000000001", group="g",
                          instance_type="ml.t3.medium", image_id="ami-x", image_root=str(root), files=files)
    assert "munge" not in repr(req) and "bytes" in repr(files[0])  # contents never in a repr
    try:
        provider.prepare_cluster("seedc1")
        inst = provider.launch(req)
        r = provider.runner("seedc1", inst.instance_id)
        # the image enables munge.service: with the key in place before boot it started during the boot itself
        assert r.run(["systemctl", "is-active", "munge"], timeout=10).stdout.strip() == "active"
        assert r.run(["munge", "-n"], timeout=10).returncode == 0
        st = r.run(["stat", "-c", "%U:%G %a", "/etc/munge/munge.key", "/etc/slurmpod/deep/nested/conf"],
                   timeout=10).stdout.split("\n")
        assert st[:2] == ["munge:munge 400", "root:slurm 640"]
        assert r.run(["sha256sum", "/etc/munge/munge.key"], timeout=10).stdout.split()[0] == \
            __import__("hashlib").sha256(KEY).hexdigest()
        assert r.run(["readlink", "/etc/systemd/system/multi-user.target.wants/slurmdbd.service"],
                     timeout=10).stdout.strip() == "/etc/systemd/system/slurmdbd.service"
        assert not list(tmp_path.rglob(SEED_FILE))  # read and removed by nodeinit
        assert r.run(["systemctl", "is-system-running"], timeout=20).stdout.strip() == "running"
        routes = r.run(["ip", "route", "show", "table", "all"], timeout=10).stdout
        for dst in ("default", "local 127.0.0.1 ", f"local {inst.ip} "):
            line = next(ln for ln in routes.splitlines() if ln.startswith(dst))
            assert "quickack 1" in line, line
        # a reboot keeps the root volume (and the files), without a seed
        provider.reboot("seedc1", inst.instance_id)
        assert r.run(["munge", "-n"], timeout=10).returncode == 0
    finally:
        provider.terminate("seedc1", "i-05eed00000000001")
        provider.teardown_cluster("seedc1")
        if find_leftovers(tmp_path):
            cleanup_report(tmp_path)
