"""A systemd node left behind by a crashed server: cleanup ends it and removes its cgroup (root only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmpod.providers.base import InstanceRequest
from slurmpod.providers.local.cleanup import cleanup_report, find_leftovers
from slurmpod.providers.local.holder import node_cgroup
from slurmpod.providers.local.provider import LocalProvider
from tests.providers.local.images import default_root


@pytest.mark.integration
def test_cleanup_ends_a_systemd_node_and_its_cgroup(tmp_path: Path) -> None:
    root = default_root()
    if os.geteuid() != 0 or root is None:
        pytest.skip("needs root and the default image (scripts/install.sh)")
    provider = LocalProvider(tmp_path)
    try:
        provider.prepare_cluster("crashc1")
        inst = provider.launch(InstanceRequest(cluster_id="crashc1", instance_id="i-0c0ffee000000001", group="g",
                                               instance_type="ml.t3.medium", image_id="ami-x", image_root=str(root)))
        r = provider.runner("crashc1", inst.instance_id)
        assert r.run(["systemctl", "is-system-running"], timeout=20).stdout.strip() == "running"
        cgroup = node_cgroup(inst.instance_id)
        assert cgroup is not None and (cgroup / "init.scope").is_dir()
        # the server "crashes" here: nothing is terminated; cleanup must find all of it
        assert any("cgroup" in item for item in find_leftovers(tmp_path))
        report = cleanup_report(tmp_path)
        assert report.ok, report.lines()
        assert not cgroup.exists()
        assert find_leftovers(tmp_path) == []
    finally:
        if find_leftovers(tmp_path):
            cleanup_report(tmp_path)
