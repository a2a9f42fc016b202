"""A lifecycle source that does what AWS's base-config does, on seed 000's cluster of systemd nodes (real Slurm).

``base_config_like/`` (our own scripts, modelled on base-config's steps): the entry script checks
``SAGEMAKER_RESOURCE_CONFIG_PATH`` and runs ``lifecycle_script.py`` with the ``provisioning_parameters.json``
next to it; that finds the node in ``resource_config.json`` by the UDP-socket trick, reads IMDS with IMDSv2 and
runs each step with ``sudo bash``: ``apt-get install hello`` (through the host's package proxy), a user from
``shared_users.txt``, ``start_slurm.sh`` (controller: ``systemctl enable --now slurmctld``; compute:
slurmd.service rendered with envsubst and ``--conf-server <controller>:6817``, ``systemctl enable --now
slurmd``) and a logrotate config. Seed 000's topology (controller-group 1, compute-group 2, Managed) runs it as
OnCreate and, in a second cluster, as OnInitComplete; both must reach InService with the effects in every node.

Where slurmpod differs from HyperPod the scripts tolerate it rather than test it: at OnCreate the controller has
no /opt/slurm/etc/slurm.conf yet (slurmpod writes it in the daemons phase), so its ``systemctl enable --now
slurmctld`` only enables the unit (ConditionPathExists) and slurmpod starts it afterwards.

Uses the image store's default image (built once by scripts/install.sh); skipped when it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import default_image, in_node, running_server
from tests.serverproc import ServerProcess, seed_groups, wait_status

pytestmark = pytest.mark.integration

SOURCE = Path(__file__).parent / "base_config_like"
LOGROTATE_FILE = "/etc/logrotate.d/base-config-like-slurm"
DEBIAN = "deb.debian.org"




@pytest.fixture
def image_server(local_state: Path) -> Iterator[tuple[ServerProcess, str]]:
    image = default_image()
    if image is None:
        pytest.skip("no default image in the image store (scripts/install.sh builds it)")
    try:  # the nodes' apt-get goes through the host's package proxy to Debian's registry
        socket.create_connection((DEBIAN, 80), timeout=5).close()
    except OSError as exc:
        pytest.skip(f"{DEBIAN} is not reachable from the host: {exc}")
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "register", "--state-dir", str(local_state),
                        image], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with running_server(local_state, "--accounting", "none") as srv:
        yield srv, image


def _on_node(state: Path, cluster_id: str, group: str, instance_id: str, script: str) -> str:
    target = f"sagemaker-cluster:{cluster_id}_{group}-{instance_id}"
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "connect", target, "--state-dir", str(state), "--",
                        "bash", "-c", script], capture_output=True, text=True, timeout=60)  # noqa: S603
    assert r.returncode == 0, (script, r.stdout, r.stderr)
    return r.stdout


def _kv(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, sep, v in (line.partition("=") for line in text.splitlines()) if sep}


# one round trip per node: what the scripts left behind
NODE_REPORT = r"""
echo "facts=$(tr -d '\n' < /var/lib/base-config-like/node.json)"
echo "hello=$(dpkg-query -W -f='${Status}' hello 2>&1) / $(hello 2>&1)"
echo "alice=$(id -u alice 2>&1):$(stat -c %u /home/alice 2>&1)"
echo "logrotate=$(test -s LOGROTATE_FILE && logrotate -d LOGROTATE_FILE >/dev/null 2>&1 && echo ok)"
for u in slurmctld slurmd; do
  echo "$u=$(systemctl is-enabled $u 2>/dev/null || true)/$(systemctl is-active $u 2>/dev/null || true)"
done
echo "execstart=$(systemctl show slurmd -p ExecStart --value 2>/dev/null | grep -o 'argv\[\]=[^;]*' | head -n 1)"
echo "aside=$(ls /etc/systemd/system | grep -c _DO_NOT_START_ON_CONTROLLER)"
echo "logged=$(grep -c 'success: all provisioning steps completed' /var/log/provision/provisioning.log)"
echo "epilog=$(grep -c '^Epilog=/opt/slurm/etc/scripts/epilog.sh$' /opt/slurm/etc/slurm.conf 2>/dev/null)"
""".replace("LOGROTATE_FILE", LOGROTATE_FILE)


@pytest.mark.parametrize("entry", ["OnCreate", "OnInitComplete"])
def test_base_config_like_scripts_bring_seed000_in_service(image_server: tuple[ServerProcess, str],
                                                           tmp_path: Path, entry: str) -> None:
    srv, image = image_server
    state = srv.state_dir
    src = tmp_path / "base-config"
    shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("__pycache__"))
    script = "on_create.sh" if entry == "OnCreate" else "on_init_complete.sh"
    lcc = {"SourceS3Uri": f"file://{src}/", entry: script}
    groups = seed_groups(2)
    for g in groups:
        g["ImageId"] = image
        g["LifeCycleConfig"] = lcc
    name = f"base-config-{entry.lower()}"
    c: Any = srv.client()
    t0 = time.monotonic()
    arn = c.create_cluster(ClusterName=name, InstanceGroups=groups,
                           Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})["ClusterArn"]
    d = wait_status(c, name, {"InService", "Failed"}, timeout=240)
    print(f"{entry}: {d['ClusterStatus']} after {time.monotonic() - t0:.1f}s")
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    cluster_id = arn.rsplit("/", 1)[1]

    nodes = c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
    assert sorted(n["InstanceGroupName"] for n in nodes) == ["compute-group", "compute-group", "controller-group"]
    ctl_ip = ""
    compute_hosts = set()
    reports = {}
    for n in nodes:
        nd = c.describe_cluster_node(ClusterName=name, NodeId=n["InstanceId"])["NodeDetails"]
        grp, iid = nd["InstanceGroupName"], nd["InstanceId"]
        info = _kv(_on_node(state, cluster_id, grp, iid, NODE_REPORT))
        reports[iid] = info
        facts = json.loads(info["facts"])
        print(f"{grp} {iid}: {facts['node_type']} at {facts['ip']}, slurm.conf there when the script ran: "
              f"{facts['slurm_conf_present']}")
        # found itself in resource_config.json by the UDP-socket trick, and IMDSv2 agrees
        assert facts["stage"] == ("on_create" if entry == "OnCreate" else "on_init_complete")
        assert facts["ip_from"] == "probe", facts
        assert facts["ip"] == nd["PrivatePrimaryIp"] == facts["imds"]["local-ipv4"], facts
        assert facts["group"] == grp and facts["instance_id"] == iid == facts["imds"]["instance-id"], facts
        assert facts["imds"]["ami-id"] == image and facts["sagemaker_cluster"] is True
        # HyperPod's InstanceName: "<group>-<n>", 1-based (AWS's multi-head setup looks for "<group>-1")
        assert re.fullmatch(rf"{grp}-[12]", facts["instance_name"] or ""), facts
        if entry == "OnInitComplete":  # the node is in Slurm: /opt/slurm/etc/slurm.conf names the controller
            assert facts["slurm_conf_present"] is True, facts
        # the package, the user (same uid everywhere, home on the shared /home), the logrotate config
        assert info["hello"] == "install ok installed / Hello, world!", info
        assert info["alice"] == "2001:2001", info
        assert info["logrotate"] == "ok", info
        assert info["logged"] == "1", info
        if grp == "controller-group":
            ctl_ip = facts["ip"]
            assert facts["node_type"] == "controller"
            assert info["slurmctld"] == "enabled/active", info
            assert info["aside"] == "1", info  # slurmd_DO_NOT_START_ON_CONTROLLER.service
            assert info["epilog"] == "1", info  # the line the script appended survived slurmpod's daemons phase
        else:
            compute_hosts.add(nd["PrivateDnsHostname"])
            assert facts["node_type"] == "compute"
            assert info["slurmd"] == "enabled/active", info
            assert info["aside"] == "1", info  # slurmctld_DO_NOT_START_ON_CONTROLLER.service
    for info in reports.values():
        if info["slurmd"].startswith("enabled"):
            assert f"--conf-server {ctl_ip}:6817" in info["execstart"], info["execstart"]

    # Slurm works: a step on both compute nodes, and one as the added user
    out = in_node(state, name, "controller-group", "bash", "-c",
                  "cd /tmp && srun -p compute -N 2 hostname && sudo -u alice srun -p compute -N 2 id -un")
    assert out.returncode == 0, (out.stdout, out.stderr)
    lines = out.stdout.split()
    assert set(lines[:2]) == compute_hosts, lines
    assert lines[2:] == ["alice", "alice"], lines
    if entry == "OnCreate":  # (at OnInitComplete slurmctld ran before the line was appended: not in force, as on AWS)
        # the appended Epilog is in force, slurmctld runs it after those jobs on the compute nodes
        conf = in_node(state, name, "controller-group", "scontrol", "show", "config").stdout
        assert "/opt/slurm/etc/scripts/epilog.sh" in conf
        deadline = time.monotonic() + 30
        while in_node(state, name, "compute-group", "sh", "-c",
                      "test -s /var/tmp/base-config-like-epilog").returncode:
            assert time.monotonic() < deadline, "the epilog never ran"
            time.sleep(0.5)
    print(f"{entry}: checks done after {time.monotonic() - t0:.1f}s")
