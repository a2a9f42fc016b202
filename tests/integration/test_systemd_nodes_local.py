"""Nodes booted from an image root filesystem with systemd as PID 1 (real Slurm, real systemd).

Uses the image store's default image (built once by scripts/install.sh); skipped when it is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpod.providers.local.nodeinit import NO_LIBBPF_DIR
from tests.integration.conftest import default_image, in_node, running_server
from tests.serverproc import ServerProcess, seed_groups, wait_status

pytestmark = pytest.mark.integration





@pytest.fixture
def image_server(local_state: Path) -> Iterator[tuple[ServerProcess, str]]:
    image = default_image()
    if image is None:
        pytest.skip("no default image in the image store (scripts/install.sh builds it)")
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "register", "--state-dir", str(local_state),
                        image], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with running_server(local_state, "--accounting", "none") as srv:
        yield srv, image


def _sh(state: Path, group: str | None, script: str) -> str:
    r = in_node(state, "sd", group, "sh", "-c", script)
    assert r.returncode == 0, (script, r.stdout, r.stderr)
    return r.stdout.strip()


def test_nodes_are_systemd_hosts_of_their_image(image_server: tuple[ServerProcess, str]) -> None:
    srv, image = image_server
    state = srv.state_dir
    marker = Path("/var/tmp") / f"slurmpod-host-marker-{os.getpid()}"
    marker.write_text("host secret\n")
    try:
        c: Any = srv.client()
        groups = seed_groups(2)
        for g in groups:
            g["ImageId"] = image
        c.create_cluster(ClusterName="sd", InstanceGroups=groups)
        d = wait_status(c, "sd", {"InService", "Failed"}, timeout=180)
        assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
        assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {image}

        for group in ("controller-group", "compute-group"):
            # nothing of the host: a marker written on the host, the host's shadow and checkout are not there
            assert _sh(state, group, f"test -e {marker} && echo seen || echo absent") == "absent"
            assert _sh(state, group, "test -e /work && echo seen || echo absent") == "absent"
            assert _sh(state, group, "md5sum /etc/shadow | cut -c1-32") != \
                subprocess.run(["md5sum", "/etc/shadow"], capture_output=True, text=True).stdout[:32]
            assert _sh(state, group, "cat /proc/1/comm") == "systemd"
            assert _sh(state, group, "systemctl is-system-running") == "running"
            # a node cannot change the host: read-only /proc/sys, capabilities dropped
            assert "Read-only" in in_node(state, "sd", group, "sh", "-c",
                                          "echo 1 > /proc/sys/vm/drop_caches").stderr
            bnd = int(_sh(state, group, "grep CapBnd /proc/1/status | cut -f2"), 16)
            for cap in (16, 17, 22, 25):  # sys_module, sys_rawio, sys_boot, sys_time
                assert not bnd & (1 << cap)
            # HyperPod's node contract
            assert _sh(state, group, "id -u ubuntu; sudo -u ubuntu sudo -n id -u") == "1000\n0"
            assert _sh(state, group, "test -d /opt/sagemaker_cluster && test -s /opt/ml/config/resource_config.json"
                                     " && test -s /opt/ml/config/provisioning_parameters.json && echo ok") == "ok"
            # instance metadata (seed 003's commands): this node's AMI
            ami = _sh(state, group, 'TOKEN=$(curl -s -X PUT "http://169.254.169.254/latest/api/token" '
                                    '-H "X-aws-ec2-metadata-token-ttl-seconds: 21600"); curl -s -H '
                                    '"X-aws-ec2-metadata-token: $TOKEN" http://169.254.169.254/latest/meta-data/ami-id')
            assert ami == image
        # systemd creates its cgroups only below the node's own cgroup in the host's tree
        host_scopes = [p for p in Path("/sys/fs/cgroup").glob("**/init.scope") if "slurmpod" not in p.parts]
        assert host_scopes == []

        # Slurm under systemd: jobs run (as ubuntu too), a killed slurmd is restarted by systemd
        assert _sh(state, None, "srun -N 2 hostname | sort | wc -l") == "2"
        out = _sh(state, None, "sudo -u ubuntu -i sbatch --parsable --wrap 'id -un > $HOME/who'")
        deadline = time.monotonic() + 30
        while _sh(state, None, "cat /home/ubuntu/who 2>/dev/null || true") != "ubuntu":
            assert time.monotonic() < deadline, f"job {out} did not run as ubuntu"
            time.sleep(0.5)
        _sh(state, "compute-group", "pkill -KILL -x slurmd")
        deadline = time.monotonic() + 20
        while _sh(state, "compute-group", "systemctl is-active slurmd || true") != "active":
            assert time.monotonic() < deadline, "slurmd was not restarted by systemd"
            time.sleep(0.3)
        assert int(_sh(state, "compute-group", "systemctl show slurmd -p NRestarts --value")) >= 1
        assert "slurmd" in _sh(state, "compute-group", "journalctl -u slurmd --no-pager -n 5")
        # slurmd runs on the options of its env file (the baseline wrote it: the controller's address)
        ctl_ip = _sh(state, "controller-group", "hostname -I").split()[0]
        assert _sh(state, "compute-group", "cat /etc/slurmpod/slurmd.env") == \
            f"SLURMD_OPTIONS=--conf-server {ctl_ip}:6817"
        # the health agent runs with slurmd (and only on compute nodes)
        assert _sh(state, "compute-group", "systemctl is-active slurmpod-health") == "active"
        assert _sh(state, "controller-group", "systemctl is-active slurmpod-health || true") == "inactive"
        # sshd, D-Bus and logind start on first use (recipe 12): a login through su starts logind
        assert _sh(state, "compute-group", "systemctl is-active ssh.socket") == "active"
        assert _sh(state, "compute-group", "su - ubuntu -c true; systemctl is-active systemd-logind") == "active"
        # systemd's libbpf features are off for PID 1 alone (nodeinit's NO_LIBBPF_DIR): its services run without
        # that library path, ``ip`` (linked to libbpf) works, and the cgroup BPF systemd needs no libbpf for holds
        assert NO_LIBBPF_DIR in _sh(state, "compute-group", "tr '\\0' '\\n' < /proc/1/environ")
        assert "LD_LIBRARY_PATH" not in _sh(state, "compute-group", "systemd-run --wait --pipe -q env")
        assert _sh(state, "compute-group", "ip -V").startswith("ip ")
        imds = "curl -s -m 2 -o /dev/null -w %{http_code} http://169.254.169.254/latest/meta-data/instance-id"
        assert _sh(state, "compute-group", f"systemd-run --wait --pipe -q {imds}") == "200"
        assert _sh(state, "compute-group", f"systemd-run --wait --pipe -q -p IPAddressDeny=any {imds} || true") \
            == "000"
    finally:
        marker.unlink(missing_ok=True)
