"""SchedMD's upgrade rules at the API: UpdateClusterSoftware to an image whose Slurm is more than two major releases
newer (22.05 -> 24.11), or older, is a ValidationException naming both versions, and nothing changes; compute nodes
may not run a newer Slurm than their controllers (CreateCluster, a partial UpdateClusterSoftware).

Real boto3 against a real server (simulated provider); the images are catalogue entries carrying Slurm versions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpod.lifecycle.images import Image, ImageCatalog
from slurmpod.settings import Settings
from tests.serverproc import RunningServer, free_port, rejected, seed_groups, thread_server, wait_status

SLURM_22 = "22.05.8-4+deb12u3"
SLURM_23 = "23.11.10-1"
SLURM_24 = "24.11.5-4+deb13u1"


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.05)
    with thread_server(settings) as s:
        yield s


def _images(srv: RunningServer) -> dict[str, str]:
    assert srv.server is not None
    cat = ImageCatalog(srv.server.store)
    out = {}
    for i, (name, version) in enumerate((("22", SLURM_22), ("23", SLURM_23), ("24", SLURM_24))):
        image = cat.register(Image(image_id=f"ami-0000000000000{i + 1:04d}", release=f"9.0.{i}", root="/",
                                   description=f"Slurm {version}", slurm_version=version))
        out[name] = image.image_id
    return out


def _groups(controller: str, compute: str) -> list[dict[str, Any]]:
    groups = seed_groups(1)
    groups[0]["ImageId"], groups[1]["ImageId"] = controller, compute
    return groups




def _events(c: Any, name: str) -> list[str]:
    return [e["Description"] for e in
            c.list_cluster_events(ClusterName=name, SortOrder="Ascending", MaxResults=100)["Events"]]


def test_a_jump_over_two_releases_or_a_downgrade_changes_nothing(srv: RunningServer) -> None:
    img = _images(srv)
    c = srv.client()
    c.create_cluster(ClusterName="up", InstanceGroups=_groups(img["22"], img["22"]))
    wait_status(c, "up", {"InService"})
    before = c.describe_cluster(ClusterName="up")
    events = _events(c, "up")
    msg = rejected(c.update_cluster_software, ClusterName="up", ImageId=img["24"])
    assert "22.05" in msg and "24.11" in msg and "at most 3 major releases" in msg, msg
    after = c.describe_cluster(ClusterName="up")
    assert after["ClusterStatus"] == "InService" and after["InstanceGroups"] == before["InstanceGroups"]
    assert _events(c, "up") == events
    nodes = c.list_cluster_nodes(ClusterName="up")["ClusterNodeSummaries"]
    assert {c.describe_cluster_node(ClusterName="up", NodeId=n["InstanceId"])["NodeDetails"]["CurrentImageId"]
            for n in nodes} == {img["22"]}
    # only the compute group to 23.11 would put slurmd ahead of slurmctld: refused too
    msg = rejected(c.update_cluster_software, ClusterName="up", ImageId=img["23"],
                    InstanceGroups=[{"InstanceGroupName": "compute-group"}])
    assert "newer than the controllers' Slurm 22.05" in msg and "compute-group" in msg, msg
    # two releases (22.05 -> 23.11) for the whole cluster is allowed
    c.update_cluster_software(ClusterName="up", ImageId=img["23"])
    d = wait_status(c, "up", {"InService"}, timeout=60)
    assert {g["SoftwareUpdateStatus"] for g in d["InstanceGroups"]} == {"Succeeded"}
    assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {img["23"]}
    # and back down is a downgrade
    msg = rejected(c.update_cluster_software, ClusterName="up", ImageId=img["22"])
    assert "cannot be downgraded" in msg and "22.05" in msg and "23.11" in msg, msg


def test_create_refuses_compute_newer_than_its_controllers(srv: RunningServer) -> None:
    img = _images(srv)
    c = srv.client()
    msg = rejected(c.create_cluster, ClusterName="mix", InstanceGroups=_groups(img["22"], img["24"]))
    assert "compute-group" in msg and "24.11" in msg and "22.05" in msg, msg
    assert c.list_clusters()["ClusterSummaries"] == []
    # compute two releases behind its controllers is what Slurm allows
    c.create_cluster(ClusterName="mix", InstanceGroups=_groups(img["23"], img["22"]))
    assert wait_status(c, "mix", {"InService", "Failed"})["ClusterStatus"] == "InService"
