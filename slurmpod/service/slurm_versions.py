"""Which Slurm release each instance group runs, and SchedMD's rules applied to a request (before it is recorded).

The release of a group is the one of its image (``Image.slurm_version``, recorded when the image was built or
imported): its nodes' images for what runs now, its ImageId (or the server's default) for what a request asks.
Unknown versions (the legacy built-in image) are not judged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from slurmpod.domain.model import NodeRecord
from slurmpod.domain.slurm_release import SlurmRelease, is_major_upgrade, major_of, mix_problem, upgrade_problem
from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import NodeType
from slurmpod.lifecycle.images import Image

Lookup = Callable[[str | None], Image | None]


Running = Mapping[str, set[str]]  # group -> the Slurm versions its active nodes run


def running_versions(nodes: Iterable[NodeRecord], lookup: Lookup) -> dict[str, set[str]]:
    """group -> the Slurm versions its active nodes' images carry (unknown ones left out); each image is looked
    up once (a catalogue lookup reads the store)."""
    by_image: dict[tuple[str, str | None], None] = {}
    for n in nodes:
        if n.active:
            by_image[(n.group, n.image_id)] = None
    versions: dict[str | None, str] = {}
    out: dict[str, set[str]] = {}
    for group, image_id in by_image:
        if image_id not in versions:
            image = lookup(image_id)
            versions[image_id] = image.slurm_version if image is not None else ""
        if versions[image_id]:
            out.setdefault(group, set()).add(versions[image_id])
    return out


def mix_findings(spec: ClusterSpec, versions: Mapping[str, str]) -> list[str]:
    """Groups whose Slurm cannot work with the controller group's (``versions``: group -> Slurm version)."""
    ctl = next((g.name for g in spec.groups_of(NodeType.CONTROLLER)), None)
    if ctl is None or not versions.get(ctl):
        return []
    out = []
    for g in spec.instance_groups:
        if g.name == ctl or not versions.get(g.name):
            continue
        problem = mix_problem(versions[ctl], versions[g.name])
        if problem:
            out.append(f"Instance group {g.name}: {problem} (controller group {ctl}).")
    return out


def desired_versions(spec: ClusterSpec, lookup: Lookup) -> dict[str, str]:
    """group -> the Slurm version of the image it asks for (its ImageId, else the default)."""
    out = {}
    for g in spec.instance_groups:
        image = lookup(g.image_id)
        if image is not None and image.slurm_version:
            out[g.name] = image.slurm_version
    return out


def update_findings(spec: ClusterSpec, running: Running, groups: Sequence[str], target: Image) -> list[str]:
    """UpdateClusterSoftware of ``groups`` to ``target`` (``running``: ``running_versions``): no downgrade, no jump
    beyond SchedMD's window (``slurm_release.max_jump``), and no group left on a Slurm the (updated) controllers
    cannot work with."""
    if not target.slurm_version:
        return []
    out = []
    for g in groups:
        for current in sorted(running.get(g, ()), key=release_of):
            problem = upgrade_problem(current, target.slurm_version)
            if problem:
                out.append(f"Instance group {g}: {problem} (image {target.image_id} has Slurm "
                           f"{target.slurm_version}; the group runs Slurm {current}).")
                break
    if out:
        return out
    after = {g: max(vs, key=release_of) for g, vs in running.items() if vs}
    after.update({g: target.slurm_version for g in groups})
    return mix_findings(spec, after)


def release_of(version: str) -> SlurmRelease:
    return major_of(version) or SlurmRelease(0, 0)


def is_upgrade(running: Running, groups: Sequence[str], target: Image) -> bool:
    """Some node of ``groups`` runs an earlier Slurm major release than ``target`` carries."""
    return any(is_major_upgrade(v, target.slurm_version) for g in groups for v in running.get(g, ()))
