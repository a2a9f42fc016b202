"""Root filesystem trees without building one: digest, symlink-safe paths, validation, dpkg database, and the
node layer's file steps on a fake tree (units rendered from Debian's stock units)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmpod.lifecycle import nodelayer
from slurmpod.lifecycle.rootfs import (
    RootfsError,
    check_rootfs,
    dpkg_versions,
    image_id_for,
    missing_node_packages,
    resolve_in_root,
    scan_tree,
)

BOOKWORM_SLURMD = """\
[Unit]
Description=Slurm node daemon
After=munge.service network-online.target remote-fs.target
Wants=network-online.target
ConditionPathExists=/etc/slurm/slurm.conf
Documentation=man:slurmd(8)

[Service]
Type=simple
EnvironmentFile=-/etc/default/slurmd
ExecStart=/usr/sbin/slurmd -D -s $SLURMD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
PIDFile=/run/slurmd.pid
KillMode=process
LimitNOFILE=131072
Delegate=yes

[Install]
WantedBy=multi-user.target
"""
TRIXIE_SLURMCTLD = """\
[Unit]
Description=Slurm controller daemon
After=network-online.target remote-fs.target munge.service sssd.service
Wants=network-online.target

[Service]
Type=notify
EnvironmentFile=-/etc/default/slurmctld
User=slurm
Group=slurm
ExecStart=/usr/sbin/slurmctld --systemd $SLURMCTLD_OPTIONS
ExecReload=/bin/kill -HUP $MAINPID
LimitNOFILE=65536
TasksMax=infinity

[Install]
WantedBy=multi-user.target
"""
STATUS = """\
Package: slurmctld
Status: install ok installed
Version: 22.05.8-4+deb12u3
Description: controller
 with a continuation line: Version: 0

Package: removed-thing
Status: deinstall ok config-files
Version: 1.0

Package: systemd
Status: install ok installed
Version: 252.39-1~deb12u1
"""


def _exe(path: Path, text: str = "#!/bin/sh\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def fake_rootfs(root: Path, *, node: bool = True) -> Path:
    """A tiny merged-/usr Debian-looking tree (no real binaries)."""
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/sbin").mkdir(parents=True)
    for link, target in (("lib", "usr/lib"), ("bin", "usr/bin"), ("sbin", "usr/sbin")):
        (root / link).symlink_to(target)
    (root / "etc").mkdir()
    (root / "usr/lib/os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
                                             "VERSION_CODENAME=bookworm\n")
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    _exe(root / "usr/lib/systemd/systemd")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\nsudo:x:27:\n")
    if node:
        for path in nodelayer_binaries():
            _exe(root / path.lstrip("/"))
        (root / "usr/lib/systemd/system").mkdir(parents=True)
        (root / "usr/lib/systemd/system/slurmd.service").write_text(BOOKWORM_SLURMD)
        (root / "etc/slurm/plugstack.conf.d").mkdir(parents=True)
        (root / "etc/slurm/plugstack.conf").write_text("include /etc/slurm/plugstack.conf.d/*\n")
        (root / "etc/munge").mkdir()
        (root / "etc/munge/munge.key").write_bytes(b"k" * 128)
        (root / "etc/ssh").mkdir()
        for k in ("ssh_host_rsa_key", "ssh_host_rsa_key.pub", "ssh_host_ed25519_key"):
            (root / "etc/ssh" / k).write_text("key")
        (root / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
        wants = root / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True)
        for unit in ("slurmd.service", "slurmctld.service", "mariadb.service", "munge.service"):
            (wants / unit).symlink_to(f"/lib/systemd/system/{unit}")
    return root


def nodelayer_binaries() -> list[str]:
    from slurmpod.lifecycle.rootfs import NODE_BINARIES

    return [*NODE_BINARIES, "/usr/bin/squeue", "/usr/bin/sbatch", "/usr/sbin/slurmdbd"]


# ---- digest --------------------------------------------------------------------------------------------


def test_digest_is_deterministic_and_ignores_mtimes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root, order in ((a, ("x", "y", "z")), (b, ("z", "y", "x"))):
        root.mkdir()
        for name in order:
            (root / name).write_text(name * 10)
        (root / "d").mkdir()
        (root / "d/link").symlink_to("../x")
    os.utime(b / "x", (1, 1))
    sa, sb = scan_tree(a), scan_tree(b)
    assert sa.digest == sb.digest and sa.digest.startswith("sha256:") and sa.files == 5
    assert image_id_for(sa.digest) == "ami-" + sa.digest[7:24]
    assert len(image_id_for(sa.digest)) == 21


@pytest.mark.parametrize("change", ["content", "mode", "owner", "link", "new", "rename"])
def test_digest_sees_every_kind_of_change(tmp_path: Path, change: str) -> None:
    root = tmp_path / "t"
    root.mkdir()
    (root / "f").write_text("hello")
    (root / "l").symlink_to("f")
    before = scan_tree(root).digest
    if change == "content":
        (root / "f").write_text("hellp")
    elif change == "mode":
        (root / "f").chmod(0o600)
    elif change == "owner":
        if os.geteuid() != 0:
            pytest.skip("needs root")
        os.chown(root / "f", 1000, 1000)
    elif change == "link":
        (root / "l").unlink()
        (root / "l").symlink_to("g")
    elif change == "new":
        (root / "empty").mkdir()
    else:
        (root / "f").rename(root / "g")
    assert scan_tree(root).digest != before


def test_image_id_needs_a_digest() -> None:
    with pytest.raises(ValueError):
        image_id_for("sha256:xyz")


# ---- paths, validation, dpkg ---------------------------------------------------------------------------


def test_resolve_in_root_never_leaves_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "r"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").symlink_to("/etc/shadow")  # absolute: inside the tree, not the host's
    (root / "etc/up").symlink_to("../../../../../etc/hostname")
    (root / "loop").symlink_to("loop")
    assert resolve_in_root(root, "/etc/passwd") == root / "etc/shadow"
    assert resolve_in_root(root, "/etc/up") == root / "etc/hostname"
    assert resolve_in_root(root, "/loop") is None


def test_check_rootfs(tmp_path: Path) -> None:
    good = fake_rootfs(tmp_path / "good", node=False)
    check_rootfs(good)
    assert missing_node_packages(good) == ["munge", "passwd", "slurm-client", "slurmctld", "slurmd", "sudo"]
    assert missing_node_packages(fake_rootfs(tmp_path / "node")) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(RootfsError, match="missing /etc/os-release, /usr/lib/systemd/systemd, /etc/passwd"):
        check_rootfs(tmp_path / "empty")
    (good / "usr/lib/os-release").write_text("ID=fedora\n")
    with pytest.raises(RootfsError, match="not a Debian-based root filesystem .*fedora"):
        check_rootfs(good)
    with pytest.raises(RootfsError, match="not a directory"):
        check_rootfs(tmp_path / "nope")


def test_dpkg_versions(tmp_path: Path) -> None:
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS)
    assert dpkg_versions(tmp_path) == {"slurmctld": "22.05.8-4+deb12u3", "systemd": "252.39-1~deb12u1"}
    assert dpkg_versions(tmp_path, ("slurmctld", "removed-thing")) == {"slurmctld": "22.05.8-4+deb12u3"}
    assert dpkg_versions(tmp_path / "none") == {}


# ---- node layer ----------------------------------------------------------------------------------------


def test_render_unit_simple_and_notify() -> None:
    slurmd = nodelayer.render_unit(BOOKWORM_SLURMD, daemon="slurmd", args="${SLURMD_OPTIONS}", condition=None,
                                   keep_env=False)
    assert "ExecStart=/opt/slurm/sbin/slurmd -D -s ${SLURMD_OPTIONS}\nRestart=on-failure\n" in slurmd
    assert "ConditionPathExists" not in slurmd and "EnvironmentFile" not in slurmd
    assert "PIDFile=/run/slurmd.pid" in slurmd and "WantedBy=multi-user.target" in slurmd
    assert "Type=simple" in slurmd and slurmd.count("ExecStart=") == 1
    ctld = nodelayer.render_unit(TRIXIE_SLURMCTLD, daemon="slurmctld", args="-f /opt/slurm/etc/slurm.conf",
                                 condition="/opt/slurm/etc/slurm.conf", keep_env=True)
    assert "Type=notify" in ctld and "User=slurm" in ctld
    assert "ExecStart=/opt/slurm/sbin/slurmctld --systemd -f /opt/slurm/etc/slurm.conf\n" in ctld
    unit_section = ctld.split("[Service]")[0]
    assert "ConditionPathExists=/opt/slurm/etc/slurm.conf" in unit_section
    assert nodelayer.notify_mode(TRIXIE_SLURMCTLD) and not nodelayer.notify_mode(BOOKWORM_SLURMD)
    with pytest.raises(nodelayer.LayerError):
        nodelayer.render_unit("[Unit]\n", daemon="x", args="", condition=None, keep_env=True)


def test_slurmd_unit_survives_a_plain_envsubst_and_reads_its_env_file() -> None:
    """AWS's start_slurm.sh renders slurmd.service with a plain envsubst: nothing but the placeholder may hold a
    ``$`` (the stock ExecReload's $MAINPID would be blanked); slurmpod itself fills the placeholder from
    ``SLURMD_ENV`` without rewriting the unit."""
    unit = nodelayer.render_unit(BOOKWORM_SLURMD, daemon="slurmd", args="${SLURMD_OPTIONS}", condition=None,
                                 keep_env=False, envsubst_safe=True, env_file=nodelayer.SLURMD_ENV)
    assert "ExecReload" not in unit and unit.count("$") == 1 and "${SLURMD_OPTIONS}" in unit
    assert f"EnvironmentFile=-{nodelayer.SLURMD_ENV}\nExecStart=/opt/slurm/sbin/slurmd -D -s ${{SLURMD_OPTIONS}}\n" \
        in unit
    r = subprocess.run(["envsubst"], input=unit, capture_output=True, text=True, timeout=10,
                       env={"SLURMD_OPTIONS": "--conf-server 10.0.0.1:6817"})
    if r.returncode == 0:  # gettext-base is there
        assert "ExecStart=/opt/slurm/sbin/slurmd -D -s --conf-server 10.0.0.1:6817\n" in r.stdout
        assert r.stdout.replace("--conf-server 10.0.0.1:6817", "${SLURMD_OPTIONS}") == unit


def test_mariadb_template_is_a_sparse_copy(tmp_path: Path) -> None:
    datadir = tmp_path / "var/lib/mysql"
    (datadir / "mysql").mkdir(parents=True)
    with (datadir / "ib_logfile0").open("wb") as f:
        f.truncate(64 << 20)
    nodelayer.mariadb_template(tmp_path)
    copy = tmp_path / nodelayer.MARIADB_TEMPLATE.lstrip("/")
    assert (copy / "mysql").is_dir() and (copy / "ib_logfile0").stat().st_size == 64 << 20
    assert (copy / "ib_logfile0").stat().st_blocks * 512 < 1 << 20
    nodelayer.mariadb_template(tmp_path / "none")  # no initialised datadir: nothing to do
    assert not (tmp_path / "none").exists()
    sid = tmp_path / "sid"  # MariaDB >= 11.8.6 of Debian sid initialises /var/lib/mariadb
    (sid / "var/lib/mariadb/mysql").mkdir(parents=True)
    nodelayer.mariadb_template(sid)
    assert (sid / nodelayer.MARIADB_TEMPLATE.lstrip("/") / "mysql").is_dir()
    assert "\ndatadir=/var/lib/mysql\n" in nodelayer.MARIADB_CNF  # the volume, whatever the suite's default


class FakeChroot:
    """Plays groupadd/useradd/visudo on the fake tree."""

    def __init__(self, root: Path) -> None:
        self.root, self.calls = root, []

    def __call__(self, argv: Sequence[str]) -> str:
        self.calls.append(list(argv))
        if argv[0] == "groupadd":
            with (self.root / "etc/group").open("a") as f:
                f.write(f"{argv[-1]}:x:{argv[2]}:\n")
        if argv[0] == "useradd":
            with (self.root / "etc/passwd").open("a") as f:
                f.write("ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n")
        return ""


@pytest.mark.parametrize("accept", ["no", "yes"])
def test_node_layer_starts_sshd_dbus_and_logind_on_demand(tmp_path: Path, accept: str) -> None:
    """(recipe 12) D-Bus and logind are not started at boot (Debian's /usr/lib links are gone, their units and the
    bus activation stay); sshd starts from ssh.socket where that socket hands sshd its listener (Accept=no), and
    stays a boot service where it would run a per-connection sshd (Accept=yes)."""
    root = fake_rootfs(tmp_path / "r")
    vendor = root / "usr/lib/systemd/system"
    (vendor / "multi-user.target.wants").mkdir()
    (vendor / "sockets.target.wants").mkdir()
    for unit in ("dbus.service", "systemd-logind.service", "systemd-user-sessions.service"):
        (vendor / unit).write_text("[Unit]\n")
        (vendor / "multi-user.target.wants" / unit).symlink_to(f"../{unit}")
    (vendor / "dbus.socket").write_text("[Socket]\n")
    (vendor / "sockets.target.wants/dbus.socket").symlink_to("../dbus.socket")
    (vendor / "ssh.service").write_text("[Service]\nExecStart=/usr/sbin/sshd -D\n")
    (vendor / "ssh.socket").write_text(f"[Socket]\nListenStream=22\nAccept = {accept}\n")
    etc = root / "etc/systemd/system"
    (etc / "multi-user.target.wants/ssh.service").symlink_to("/usr/lib/systemd/system/ssh.service")
    nodelayer.apply_node_layer(root, FakeChroot(root))
    wants = sorted(p.name for p in (vendor / "multi-user.target.wants").iterdir())
    assert wants == ["systemd-user-sessions.service"]
    assert (vendor / "sockets.target.wants/dbus.socket").is_symlink()
    assert (vendor / "systemd-logind.service").is_file()
    on_socket = accept == "no"
    assert os.path.lexists(etc / "sockets.target.wants/ssh.socket") is on_socket
    assert os.path.lexists(etc / "multi-user.target.wants/ssh.service") is not on_socket
    if on_socket:
        assert os.readlink(etc / "sockets.target.wants/ssh.socket") == "/usr/lib/systemd/system/ssh.socket"
    before = scan_tree(root).digest
    nodelayer.apply_node_layer(root, FakeChroot(root))
    assert scan_tree(root).digest == before


def test_node_layer_on_a_fake_tree(tmp_path: Path) -> None:
    root = fake_rootfs(tmp_path / "r")
    for gen in ("systemd-gpt-auto-generator", "systemd-fstab-generator", "systemd-tpm2-generator"):
        _exe(root / "usr/lib/systemd/system-generators" / gen)
    chroot = FakeChroot(root)
    nodelayer.apply_node_layer(root, chroot)
    units = root / "etc/systemd/system"
    # generators that find nothing in a node are off; those a user's script may rely on (fstab) are not; none is
    # masked that the suite does not ship
    assert sorted(p.name for p in (root / "etc/systemd/system-generators").iterdir()) == [
        "systemd-gpt-auto-generator", "systemd-tpm2-generator"]
    assert os.readlink(root / "etc/systemd/system-generators/systemd-tpm2-generator") == "/dev/null"
    assert os.readlink(units / "systemd-tpm2-setup.service") == "/dev/null"
    assert os.readlink(units / "getty@tty1.service") == "/dev/null"
    assert not (units / "multi-user.target.wants/slurmd.service").is_symlink()
    assert not (units / "multi-user.target.wants/mariadb.service").is_symlink()
    assert (units / "multi-user.target.wants/munge.service").is_symlink()
    slurmd = (units / "slurmd.service").read_text()
    assert "${SLURMD_OPTIONS}" in slurmd and "/opt/slurm/sbin/slurmd -D -s" in slurmd
    ctld = (units / "slurmctld.service").read_text()
    assert "ExecStart=/opt/slurm/sbin/slurmctld -D -s -f /opt/slurm/etc/slurm.conf" in ctld  # fallback unit
    assert "Restart=on-failure" in ctld and (units / "slurmdbd.service").is_file()
    assert os.readlink(root / "etc/slurm") == "/opt/slurm/etc"
    assert (root / "opt/slurm/etc").is_dir() and not (root / "opt/slurm/etc").is_symlink()
    assert (root / "opt/slurm/etc/plugstack.conf").is_file()  # Debian's files moved, not lost
    assert os.readlink(root / "opt/slurm/bin/sinfo") == "/usr/bin/sinfo"
    assert os.readlink(root / "opt/slurm/sbin/slurmd") == "/usr/sbin/slurmd"
    assert not (root / "opt/slurm/bin/sdiag").is_symlink()  # not in this tree: no dangling link
    assert not (root / "etc/munge/munge.key").exists()
    assert not list((root / "etc/ssh").glob("ssh_host_*"))
    assert (root / "etc/machine-id").read_text() == ""
    assert "ed25519" in (units / "ssh.service.d/slurmpod.conf").read_text()
    assert "Storage=volatile" in (root / "etc/systemd/journald.conf.d/slurmpod.conf").read_text()
    sudoers = root / "etc/sudoers.d/90-ubuntu"
    assert sudoers.read_text() == "ubuntu ALL=(ALL) NOPASSWD:ALL\n" and sudoers.stat().st_mode & 0o777 == 0o440
    assert [c[0] for c in chroot.calls] == ["groupadd", "useradd", "visudo"]
    assert "-G" in chroot.calls[1] and "/bin/bash" in chroot.calls[1]
    for d in ("opt/sagemaker_cluster", "opt/ml/config", "var/log/provision"):
        assert (root / d).is_dir()
    usr = os.lstat(root / "usr").st_mtime_ns
    for d in ("etc", "var"):
        assert os.lstat(root / d / ".updated").st_mtime_ns >= usr
    # applying it again (an import of an image that already has it) changes nothing
    before = scan_tree(root).digest
    nodelayer.apply_node_layer(root, FakeChroot(root))
    assert scan_tree(root).digest == before


def test_node_layer_refuses_a_foreign_uid_1000(tmp_path: Path) -> None:
    root = fake_rootfs(tmp_path / "r")
    with (root / "etc/passwd").open("a") as f:
        f.write("debian:x:1000:1000::/home/debian:/bin/sh\n")
    with pytest.raises(nodelayer.LayerError, match="uid 1000 is taken by user debian"):
        nodelayer.ubuntu_user(root, FakeChroot(root))


def _mariadb_root(tmp_path: Path) -> Path:
    """A fake image with MariaDB's server and config directory (the node layer's accounting part applies)."""
    root = fake_rootfs(tmp_path / "r")
    _exe(root / "usr/sbin/mariadbd")
    (root / "etc/mysql/mariadb.conf.d").mkdir(parents=True)
    return root


@pytest.mark.parametrize(("run_dir", "linked"), [("/run/mysqld", False), ("/run/mariadbd", True)])
def test_mariadb_socket_link_only_where_mariadb_moved_it(tmp_path: Path, run_dir: str, linked: bool) -> None:
    """MariaDB 11.8 (sid) makes /run/mariadbd; bookworm's and trixie's /run/mysqld keep the layer unchanged."""
    root = _mariadb_root(tmp_path)
    (root / "usr/lib/tmpfiles.d").mkdir(parents=True)
    (root / "usr/lib/tmpfiles.d/mariadb.conf").write_text(f"# socket dir\nd {run_dir} 0755 mysql root -\n")
    nodelayer.slurm_units(root)
    link = root / "etc/tmpfiles.d/slurmpod-mysqld.conf"
    assert link.is_file() == linked
    if linked:
        assert "L /run/mysqld/mysqld.sock - - - - /run/mariadbd/mysqld.sock" in link.read_text()


@pytest.mark.parametrize(("slurmdbd", "off"), [("24.11.5-4+deb13u1", False), ("26.05.5-1", True)])
def test_snapshot_isolation_off_for_slurmdbd_after_24_11(tmp_path: Path, slurmdbd: str, off: bool) -> None:
    root = _mariadb_root(tmp_path)
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(f"Package: slurmdbd\nStatus: install ok installed\nVersion: {slurmdbd}\n")
    nodelayer.slurm_units(root)
    cnf = (root / "etc/mysql/mariadb.conf.d/60-slurmpod.cnf").read_text()
    assert cnf.startswith(nodelayer.MARIADB_CNF) and ("innodb_snapshot_isolation=OFF" in cnf) == off
    # every server setting is in [mysqld]; the clients' group comes last
    server, client = cnf.split("[client-mariadb]\n")
    assert "[mysqld]" in server and "skip-ssl" in server and ("innodb_snapshot_isolation=OFF" in server) == off
    assert client == "skip-ssl\n"
