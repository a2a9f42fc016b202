"""A real image, checked for the node layer: the default image ``scripts/install.sh`` built into the host-wide
image store (reused, never rebuilt here), or, when there is none, ONE build of it into a temporary store with
the warm apt cache. (Bad build input is tested without mmdebstrap in test_image_store.py: a real run only
fails at a missing package after installing the essential set, ~30 s.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpod.lifecycle.imagebuild import BuildRequest, build_image
from slurmpod.lifecycle.imagestore import PRIMARY_SUITE, ImageStore, Manifest
from slurmpod.lifecycle.nodelayer import RECIPE_VERSION
from slurmpod.lifecycle.rootfs import scan_tree

pytestmark = pytest.mark.integration


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if shutil.which("mmdebstrap") is None:
        pytest.skip("needs mmdebstrap (scripts/install.sh installs it)")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ImageStore, Manifest]]:
    _needs_root()
    shared = ImageStore()
    found = shared.default(RECIPE_VERSION, PRIMARY_SUITE)
    if found is not None:
        yield shared, found
        return
    store = ImageStore(tmp_path_factory.mktemp("images") / "store")
    try:
        yield store, build_image(store, BuildRequest(description="integration test"), print)
    finally:
        shutil.rmtree(store.root, ignore_errors=True)


def _chroot(root: Path, *argv: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, timeout=60, check=True,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **(env or {})})
    return done.stdout


def test_image_has_the_node_layer(image: tuple[ImageStore, Manifest]) -> None:
    store, m = image
    root = store.rootfs(m.id)
    assert m.slurm_version.startswith("24.11") and m.suite == PRIMARY_SUITE and m.recipe == RECIPE_VERSION
    assert m.size > 100 * 2**20 and m.id.startswith("ami-") and len(m.id) == 21
    assert store.image_dir(m.id).stat().st_mode & 0o777 == 0o555
    # ubuntu uid/gid 1000, bash, passwordless sudo accepted by the image's own sudo
    ubuntu = next(line for line in (root / "etc/passwd").read_text().splitlines() if line.startswith("ubuntu:"))
    assert ubuntu.split(":")[2:4] == ["1000", "1000"] and ubuntu.endswith(":/bin/bash")
    sudoers = root / "etc/sudoers.d/90-ubuntu"
    assert "NOPASSWD:ALL" in sudoers.read_text() and sudoers.stat().st_mode & 0o777 == 0o440
    _chroot(root, "visudo", "-c", "-q")
    # Slurm under /opt/slurm; Debian's default config path lands there
    assert (root / "opt/slurm/etc").is_dir() and not (root / "opt/slurm/etc").is_symlink()
    assert os.readlink(root / "etc/slurm") == "/opt/slurm/etc"
    for rel in ("opt/slurm/sbin/slurmd", "opt/slurm/sbin/slurmctld", "opt/slurm/bin/sinfo", "opt/slurm/bin/sdiag"):
        assert (root / "usr" / os.readlink(root / rel).split("/usr/", 1)[1]).is_file(), rel
    unit = (root / "etc/systemd/system/slurmd.service").read_text()
    # the stock unit's own start flags: 22.05 forks a pid-file daemon kept in the foreground, 24.11 notifies systemd
    flags = "-D -s" if m.slurm_version.startswith("22.05") else "--systemd"
    assert f"ExecStart=/opt/slurm/sbin/slurmd {flags} ${{SLURMD_OPTIONS}}" in unit and "Restart=on-failure" in unit
    assert ("PIDFile=/run/slurmd.pid" in unit) == (flags == "-D -s")  # as Debian's stock unit says
    rendered = subprocess.run(["chroot", str(root), "envsubst"], input=unit, capture_output=True, text=True,
                              timeout=30, check=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                                           "SLURMD_OPTIONS": "--conf-server 10.1.0.2"}).stdout
    assert f"ExecStart=/opt/slurm/sbin/slurmd {flags} --conf-server 10.1.0.2" in rendered  # AWS's start_slurm.sh way
    ctld = (root / "etc/systemd/system/slurmctld.service").read_text()
    assert f"ExecStart=/opt/slurm/sbin/slurmctld {flags} -f /opt/slurm/etc/slurm.conf" in ctld
    assert not (root / "etc/systemd/system/multi-user.target.wants/slurmd.service").exists()
    assert not (root / "etc/systemd/system/multi-user.target.wants/mariadb.service").exists()
    # slurmpod's SPANK plugins, and what containers in jobs run on (podman/crun, catatonit, Docker; ubuntu may use it)
    for rel in ("usr/lib/slurmpod/spank_auto_resume.so", "usr/lib/slurmpod/spank_containers.so", "usr/bin/podman",
                "usr/bin/crun", "usr/bin/catatonit", "usr/bin/unsquashfs", "usr/bin/docker", "usr/sbin/dockerd"):
        assert (root / rel).is_file(), rel
    docker = next(line for line in (root / "etc/group").read_text().splitlines() if line.startswith("docker:"))
    assert "ubuntu" in docker.rsplit(":", 1)[1].split(",")
    wants = root / "etc/systemd/system"
    assert (wants / "sockets.target.wants/docker.socket").is_symlink()  # Docker starts on first use, not at boot
    assert not os.path.lexists(wants / "multi-user.target.wants/docker.service")
    assert not os.path.lexists(wants / "default.target.wants/podman.service")
    # boot work a node does not need is masked (the journal is volatile, no fstab, no macvlan DHCP)
    for unit in ("systemd-journal-flush.service", "systemd-remount-fs.service", "run-lock.mount",
                 "netavark-dhcp-proxy.service", "getty@tty1.service"):
        assert os.readlink(wants / unit) == "/dev/null", unit
    # (recipe 10) and what can find or do nothing in a container: TPM, /dev's static nodes, most generators
    for unit in ("systemd-tpm2-setup.service", "systemd-tmpfiles-setup-dev.service", "systemd-binfmt.service"):
        assert os.readlink(wants / unit) == "/dev/null", unit
    generators = root / "etc/systemd/system-generators"
    assert os.readlink(generators / "systemd-gpt-auto-generator") == "/dev/null"
    assert not os.path.lexists(generators / "systemd-fstab-generator")
    assert "ExecStartPre=/usr/sbin/sshd -t" not in (wants / "ssh.service.d/slurmpod.conf").read_text()
    # (recipe 12) sshd, D-Bus and logind start on first use: trixie's ssh.socket hands sshd its listener
    assert os.readlink(wants / "sockets.target.wants/ssh.socket") == "/usr/lib/systemd/system/ssh.socket"
    assert not os.path.lexists(wants / "multi-user.target.wants/ssh.service")
    for unit in ("dbus.service", "systemd-logind.service"):
        assert not os.path.lexists(root / "usr/lib/systemd/system/multi-user.target.wants" / unit), unit
        assert (root / "usr/lib/systemd/system" / unit).is_file(), unit
    # the accounting database template holds slurmdbd's tables (made once per image), not its build-time user
    template = root / "usr/share/slurmpod/mariadb-datadir"
    assert int((template / ".slurmpod-schema").read_text()) >= 10 and (template / "slurm_acct_db").is_dir()
    assert not {p.name for p in (root / "run").iterdir()} - {"lock"}  # the schema's daemons left nothing in /run
    assert not (root / "var/log/slurm/slurmdbd.log").exists()
    # per-node bits are not in the image
    assert not (root / "etc/munge/munge.key").exists()
    assert not list((root / "etc/ssh").glob("ssh_host_*"))
    assert (root / "etc/machine-id").read_text() == ""
    for rel in ("opt/sagemaker_cluster", "opt/ml/config", "var/log/provision", "etc/.updated", "var/.updated"):
        assert (root / rel).exists(), rel
    # content-addressed and unchanged since it was stored
    assert scan_tree(root).digest == m.digest

