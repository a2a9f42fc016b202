"""An ImageId that is not in the server's image catalogue: CreateCluster, UpdateCluster and UpdateClusterSoftware
answer a ValidationException naming the image (and `slurmpod images list`) and create or change nothing.

Real boto3 against a real server (simulated provider); ``default`` and catalogued images stay valid.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpod.lifecycle.images import ImageCatalog
from slurmpod.settings import Settings
from tests.serverproc import RunningServer, free_port, rejected, seed_groups, thread_server, wait_status

UNKNOWN = "ami-0123456789abcdef0"  # the API's pattern, not in any catalogue
HINT = "slurmpod images list"


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.05)
    with thread_server(settings) as s:
        yield s


def _groups(compute_image: str | None = None, controller_image: str | None = None) -> list[dict[str, Any]]:
    groups = seed_groups(1)
    for g, image in zip(groups, (controller_image, compute_image), strict=True):
        if image is not None:
            g["ImageId"] = image
    return groups




def _events(c: Any, name: str) -> list[str]:
    return [e["Description"] for e in
            c.list_cluster_events(ClusterName=name, SortOrder="Ascending", MaxResults=100)["Events"]]


def _publish(srv: RunningServer) -> str:
    assert srv.server is not None
    return ImageCatalog(srv.server.store).publish(base=None, script="echo new", description="",
                                                  now=time.time()).image_id


def test_create_with_unknown_image_creates_nothing(srv: RunningServer) -> None:
    c = srv.client()
    for groups in (_groups(compute_image=UNKNOWN), _groups(controller_image=UNKNOWN),
                   _groups(compute_image=UNKNOWN, controller_image=UNKNOWN)):
        msg = rejected(c.create_cluster, ClusterName="img-bad", InstanceGroups=groups)
        assert UNKNOWN in msg and HINT in msg, msg
        assert msg.startswith(f"{sum(g.get('ImageId') == UNKNOWN for g in groups)} validation error"), msg
        assert c.list_clusters()["ClusterSummaries"] == []
        with pytest.raises(c.exceptions.ResourceNotFound):
            c.describe_cluster(ClusterName="img-bad")
    assert srv.server is not None
    assert srv.server.store.list_clusters() == []  # no record at all, not even a Failed/Deleting one
    # the name was never taken: the same request with a usable image goes through
    c.create_cluster(ClusterName="img-bad", InstanceGroups=_groups(compute_image="default"))
    d = wait_status(c, "img-bad", {"InService", "Failed"})
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    latest = ImageCatalog(srv.server.store).latest().image_id
    assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {latest}
    assert _events(c, "img-bad")[0].startswith("Cluster img-bad creation started")


def test_create_with_a_catalogued_image(srv: RunningServer) -> None:
    c = srv.client()
    new = _publish(srv)
    c.create_cluster(ClusterName="img-ok", InstanceGroups=_groups(compute_image=new, controller_image=new))
    d = wait_status(c, "img-ok", {"InService", "Failed"})
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {new}


def test_update_with_unknown_image_changes_nothing(srv: RunningServer) -> None:
    c = srv.client()
    image = _publish(srv)
    c.create_cluster(ClusterName="img-upd", InstanceGroups=_groups(compute_image=image))
    wait_status(c, "img-upd", {"InService"})
    before = c.describe_cluster(ClusterName="img-upd")
    events = _events(c, "img-upd")

    msg = rejected(c.update_cluster, ClusterName="img-upd", InstanceGroups=_groups(compute_image=UNKNOWN))
    assert UNKNOWN in msg and HINT in msg and "compute-group" in msg, msg
    # a rejected update of the counts too: nothing of the request is applied
    bigger = _groups(compute_image=UNKNOWN)
    bigger[1]["InstanceCount"] = 3
    rejected(c.update_cluster, ClusterName="img-upd", InstanceGroups=bigger)
    after = c.describe_cluster(ClusterName="img-upd")
    assert after["ClusterStatus"] == "InService"
    for key in ("InstanceGroups", "ClusterStatus", "Orchestrator"):
        assert after.get(key) == before.get(key), key
    assert _events(c, "img-upd") == events

    # the group's current ImageId repeated (and `default` for a group without one) is accepted
    same = _groups(compute_image=image, controller_image="default")
    c.update_cluster(ClusterName="img-upd", InstanceGroups=same)
    d = wait_status(c, "img-upd", {"InService", "Failed"})
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")


def test_update_software_with_unknown_image_changes_nothing(srv: RunningServer) -> None:
    c = srv.client()
    c.create_cluster(ClusterName="img-su", InstanceGroups=_groups())
    wait_status(c, "img-su", {"InService"})
    before = c.describe_cluster(ClusterName="img-su")
    events = _events(c, "img-su")
    for scope in ({}, {"InstanceGroups": [{"InstanceGroupName": "compute-group"}]}):
        msg = rejected(c.update_cluster_software, ClusterName="img-su", ImageId=UNKNOWN, **scope)
        assert UNKNOWN in msg and HINT in msg, msg
    after = c.describe_cluster(ClusterName="img-su")
    assert after["ClusterStatus"] == "InService"
    assert after["InstanceGroups"] == before["InstanceGroups"]  # no SoftwareUpdateStatus, same images
    assert "ActiveSoftwareUpdateConfig" not in after or after.get("ActiveSoftwareUpdateConfig") == \
        before.get("ActiveSoftwareUpdateConfig")
    assert _events(c, "img-su") == events
    # `default` is still a valid target (the latest release)
    c.update_cluster_software(ClusterName="img-su", ImageId="default")
    d = wait_status(c, "img-su", {"InService"}, timeout=60)
    assert {g["SoftwareUpdateStatus"] for g in d["InstanceGroups"]} == {"Succeeded"}
