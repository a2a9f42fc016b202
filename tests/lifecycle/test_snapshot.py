"""Content-addressed snapshots: stable digests, reuse, read-only, crash-safe temp handling."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurmpod.lifecycle.snapshot import TEMP_PREFIX, load_snapshot, snapshot_source
from slurmpod.lifecycle.sources import LifecycleSourceError
from tests.lifecycle.conftest import write_tree

FILES = {"on_create.sh": "#!/bin/bash\necho hi\n", "lib/a.py": "A = 1\n"}


def snap(src: Path, snaps: Path):
    return snapshot_source(f"file://{src}", snaps)


def test_snapshot_layout_and_read_only(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", FILES, executable=["on_create.sh"])
    s = snap(src, tmp_path / "snaps")
    assert s.digest.startswith("sha256:") and len(s.hex) == 64
    assert s.path == tmp_path / "snaps" / s.hex
    assert s.files == ("lib/a.py", "on_create.sh")
    assert (s.path / "on_create.sh").read_text() == FILES["on_create.sh"]
    assert stat.S_IMODE(os.stat(s.path / "on_create.sh").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(s.path / "lib/a.py").st_mode) == 0o444
    assert stat.S_IMODE(os.stat(s.path).st_mode) == 0o555
    assert stat.S_IMODE(os.stat(s.path / "lib").st_mode) == 0o555
    assert s.is_executable("on_create.sh") and not s.is_executable("lib/a.py")
    assert not list((tmp_path / "snaps").glob(TEMP_PREFIX + "*"))


def test_same_content_same_digest_and_reuse(tmp_path: Path) -> None:
    a = write_tree(tmp_path / "a", FILES, executable=["on_create.sh"])
    b = write_tree(tmp_path / "b", FILES, executable=["on_create.sh"])
    s1 = snap(a, tmp_path / "snaps")
    inode = os.stat(s1.path).st_ino
    s2 = snap(b, tmp_path / "snaps")
    s3 = snap(a, tmp_path / "snaps")
    assert s1 == s2 == s3
    assert os.stat(s2.path).st_ino == inode  # reused, not rewritten
    assert [p.name for p in (tmp_path / "snaps").iterdir()] == [s1.hex]


def test_changes_give_new_digest(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", FILES, executable=["on_create.sh"])
    base = snap(src, tmp_path / "snaps")
    (src / "lib/a.py").write_text("A = 2\n")
    changed = snap(src, tmp_path / "snaps")
    (src / "lib/a.py").write_text("A = 1\n")
    (src / "on_create.sh").chmod(0o644)
    mode_changed = snap(src, tmp_path / "snaps")
    (src / "on_create.sh").chmod(0o755)
    (src / "lib/a.py").rename(src / "lib/b.py")
    renamed = snap(src, tmp_path / "snaps")
    digests = {base.digest, changed.digest, mode_changed.digest, renamed.digest}
    assert len(digests) == 4
    assert (base.path / "lib/a.py").read_text() == "A = 1\n"  # the old snapshot is untouched


def test_digest_does_not_depend_on_location_or_mtime(tmp_path: Path) -> None:
    a = write_tree(tmp_path / "a", FILES)
    b = write_tree(tmp_path / "elsewhere" / "b", FILES)
    os.utime(b / "lib/a.py", (0, 0))
    assert snap(a, tmp_path / "s1").digest == snap(b, tmp_path / "s2").digest


def test_failed_fetch_leaves_nothing(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", FILES)
    (src / "leak").symlink_to("/etc/hostname")
    with pytest.raises(LifecycleSourceError):
        snap(src, tmp_path / "snaps")
    assert list((tmp_path / "snaps").iterdir()) == []


def test_stale_temp_dirs_are_removed(tmp_path: Path) -> None:
    snaps = tmp_path / "snaps"
    stale = snaps / f"{TEMP_PREFIX}crashed"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "f").write_text("x")
    (stale / "sub").chmod(0o555)
    os.utime(stale, (1, 1))
    fresh = snaps / f"{TEMP_PREFIX}inflight"
    fresh.mkdir()
    snap(write_tree(tmp_path / "src", FILES), snaps)
    assert not stale.exists()
    assert fresh.exists()


def test_load_snapshot(tmp_path: Path) -> None:
    s = snap(write_tree(tmp_path / "src", FILES), tmp_path / "snaps")
    assert load_snapshot(tmp_path / "snaps", s.digest, verify=True) == s
    with pytest.raises(LifecycleSourceError, match="missing"):
        load_snapshot(tmp_path / "snaps", "sha256:" + "0" * 64)
    with pytest.raises(LifecycleSourceError, match="Invalid"):
        load_snapshot(tmp_path / "snaps", "sha256:../../etc")
    target = s.path / "lib/a.py"
    target.chmod(0o644)
    target.write_text("tampered\n")
    target.chmod(0o444)
    with pytest.raises(LifecycleSourceError, match="corrupted"):
        load_snapshot(tmp_path / "snaps", s.digest, verify=True)
