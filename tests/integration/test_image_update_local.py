"""Seed 003 on systemd nodes: IMDSv2's ``ami-id`` is the group's CurrentImageId, before and after an
UpdateClusterSoftware onto a second image, and the nodes then run that image's bits.

The second image is the store's default image with a changed ``/etc/os-release`` and a marker file, imported with
``slurmpod images import`` into the host-wide store (copy ~3 s, import ~4 s) and deleted again at the end, also
on failure, so the store is left as found. Skipped without the default image (scripts/install.sh builds it).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import IMAGE_STORE, default_image, in_node, running_server
from tests.serverproc import seed_groups, wait_status

pytestmark = pytest.mark.integration

NAME = "imgupd"
MARKER_FILE = "/etc/slurmpod-test-image"
IMDS = ('T=$(curl -sf -X PUT http://169.254.169.254/latest/api/token -H "X-aws-ec2-metadata-token-ttl-seconds: 60");'
        ' for k in ami-id instance-id; do curl -sf -H "X-aws-ec2-metadata-token: $T" '
        "http://169.254.169.254/latest/meta-data/$k; echo; done")
# and whether the root volume is the one probed before (a root-volume replacement starts a fresh one)
PROBE = IMDS + (f'; . /etc/os-release; echo "$PRETTY_NAME"; cat {MARKER_FILE} 2>/dev/null || echo none;'
                " test -e /root/probed && echo probed || echo fresh; touch /root/probed")


@dataclass(frozen=True)
class Images:
    default: str
    new: str
    marker: str  # in the new image's PRETTY_NAME and MARKER_FILE


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)




def _variant(default: str, root: Path, marker: str) -> None:
    """A copy of the default image's tree whose os-release and marker file say ``marker``."""
    subprocess.run(["cp", "-a", "--", str(IMAGE_STORE / default / "rootfs"), str(root)], check=True, timeout=300)
    root.chmod(0o755)  # the store's rootfs top is 0555
    osr = root / "etc/os-release"
    target = root / "usr/lib/os-release" if osr.is_symlink() else osr  # Debian: a link to ../usr/lib/os-release
    lines = [ln for ln in target.read_text().splitlines() if not ln.startswith("PRETTY_NAME=")]
    target.write_text("\n".join([f'PRETTY_NAME="Debian GNU/Linux 12 (bookworm) {marker}"', *lines]) + "\n")
    (root / MARKER_FILE.lstrip("/")).write_text(marker + "\n")


def _remove_image(state: Path, image_id: str) -> None:
    """``images delete`` (catalogue entry, reference and files); if that left the files (a cluster still using
    it after a failure), the nodes are cleaned up and the image is removed from the store directly."""
    r = _cli("images", "delete", "--state-dir", str(state), "--image-store", str(IMAGE_STORE), image_id, timeout=120)
    if not (IMAGE_STORE / image_id).exists():
        return
    print(f"images delete left {image_id} in the store ({r.returncode}: {r.stdout}{r.stderr}); removing it")
    from slurmpod.lifecycle.imagestore import ImageStore
    from slurmpod.providers.local.cleanup import cleanup, find_leftovers

    if find_leftovers(state):
        cleanup(state)
    ImageStore(IMAGE_STORE).delete(image_id)


@pytest.fixture
def images(local_state: Path, tmp_path: Path) -> Iterator[Images]:
    default = default_image()
    if default is None:
        pytest.skip("no default image in the image store (scripts/install.sh builds it)")
    r = _cli("images", "register", "--state-dir", str(local_state), "--image-store", str(IMAGE_STORE), default)
    assert r.returncode == 0, r.stderr
    marker = f"slurmpod-test-{secrets.token_hex(6)}"  # unique bits: an id of its own, used by no one else
    root = tmp_path / "rootfs"
    new = ""
    try:
        _variant(default, root, marker)
        r = _cli("images", "import", str(root), "--state-dir", str(local_state), "--image-store", str(IMAGE_STORE),
                 "--description", f"test variant {marker}")
        found = [w for ln in r.stdout.splitlines() if ln.startswith("registered ") for w in ln.split()[1:2]]
        new = found[0] if found else ""
        assert r.returncode == 0 and new.startswith("ami-"), (r.stdout, r.stderr)
        shutil.rmtree(root)
        assert new != default
        yield Images(default, new, marker)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if new:
            _remove_image(local_state, new)
        from slurmpod.lifecycle.imagestore import ImageStore

        ImageStore(IMAGE_STORE).drop_ref(default, local_state)  # this state dir's reference to the default image
        assert not new or not (IMAGE_STORE / new).exists(), f"{new} was left in {IMAGE_STORE}"


def _probe(state: Path, cluster_id: str, node: dict[str, Any]) -> list[str]:
    """ami-id, instance-id (IMDSv2), PRETTY_NAME, the marker file and fresh|probed, from inside the node."""
    target = f"sagemaker-cluster:{cluster_id}_{node['InstanceGroupName']}-{node['InstanceId']}"
    r = _cli("connect", target, "--state-dir", str(state), "--", "sh", "-c", PROBE, timeout=60)
    assert r.returncode == 0, (node["InstanceId"], r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 5, lines
    return lines


def _nodes(c: Any) -> list[dict[str, Any]]:
    return list(c.list_cluster_nodes(ClusterName=NAME)["ClusterNodeSummaries"])


def test_imds_ami_follows_software_update(images: Images, local_state: Path) -> None:
    with running_server(local_state, "--accounting", "none") as srv:
        c: Any = srv.client()
        groups = seed_groups(2)
        for g in groups:
            g["ImageId"] = images.default
        cluster_id = c.create_cluster(ClusterName=NAME, InstanceGroups=groups)["ClusterArn"].rsplit("/", 1)[1]
        d = wait_status(c, NAME, {"InService", "Failed"}, timeout=180)
        assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
        assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {images.default}

        before = _nodes(c)
        assert len(before) == 3
        for n in before:
            ami, iid, pretty, marker, root = _probe(local_state, cluster_id, n)
            assert (ami, iid, root) == (images.default, n["InstanceId"], "fresh")
            assert images.marker not in pretty and marker == "none"

        c.update_cluster_software(ClusterName=NAME, ImageId=images.new)
        d = wait_status(c, NAME, {"InService"}, timeout=300)
        assert d.get("FailureMessage") is None, d.get("FailureMessage")
        assert {g["SoftwareUpdateStatus"] for g in d["InstanceGroups"]} == {"Succeeded"}
        assert {g["CurrentImageId"] for g in d["InstanceGroups"]} == {images.new}

        after = _nodes(c)
        assert {n["InstanceId"] for n in after} == {n["InstanceId"] for n in before}  # replaced in place
        for n in after:
            assert c.describe_cluster_node(ClusterName=NAME, NodeId=n["InstanceId"])["NodeDetails"][
                "CurrentImageId"] == images.new
            ami, iid, pretty, marker, root = _probe(local_state, cluster_id, n)
            assert (ami, iid, root) == (images.new, n["InstanceId"], "fresh"), n["InstanceGroupName"]
            assert images.marker in pretty and marker == images.marker, (pretty, marker)

        # Slurm still runs jobs on the new root volumes
        r = in_node(local_state, NAME, None, "sh", "-c", "srun -N 2 hostname | sort -u | wc -l", timeout=90)
        assert (r.returncode, r.stdout.strip()) == (0, "2"), (r.stdout, r.stderr)
