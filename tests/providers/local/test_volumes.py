"""A new volume made on the host as a whole copy of a directory of the node's image (``VolumeMount.seed``): the
accounting host's MariaDB datadir starts as the image's template before the host boots."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from slurmpod.providers.base import SEEDED_MARKER, TemporaryProviderError
from slurmpod.providers.local import volumes
from slurmpod.providers.local.volumes import seed_volume


def _image(tmp_path: Path) -> Path:
    root = tmp_path / "rootfs"
    template = root / "usr/share/tmpl"
    (template / "mysql").mkdir(parents=True)
    (template / "mysql" / "db.opt").write_text("x")
    with (template / "ibdata1").open("wb") as fh:  # sparse: 64 MiB apparent, nothing written
        fh.truncate(64 << 20)
    if os.geteuid() == 0:
        os.chown(template / "mysql" / "db.opt", 123, 456)
    return root


def test_an_absent_volume_becomes_a_whole_copy_with_the_marker(tmp_path: Path) -> None:
    root = _image(tmp_path)
    vol = tmp_path / "volumes" / "db"
    assert seed_volume(vol, str(root), "/usr/share/tmpl")
    assert (vol / "mysql" / "db.opt").read_text() == "x" and (vol / SEEDED_MARKER).is_file()
    assert (vol / "ibdata1").stat().st_size == 64 << 20 and (vol / "ibdata1").stat().st_blocks == 0
    if os.geteuid() == 0:  # the image's numeric owners, as in the node
        st = (vol / "mysql" / "db.opt").stat()
        assert (st.st_uid, st.st_gid) == (123, 456)
    assert sorted(p.name for p in vol.parent.iterdir()) == ["db"]  # nothing half-made beside it


def test_an_existing_volume_or_an_image_without_the_directory_is_left_alone(tmp_path: Path) -> None:
    root = _image(tmp_path)
    vol = tmp_path / "volumes" / "db"
    vol.mkdir(parents=True)
    (vol / "data").write_text("kept")
    assert not seed_volume(vol, str(root), "/usr/share/tmpl")
    assert sorted(p.name for p in vol.iterdir()) == ["data"]
    other = tmp_path / "volumes" / "other"
    assert not seed_volume(other, str(root), "/usr/share/none")
    assert not other.exists()


def test_a_failed_copy_leaves_no_volume_and_no_partial_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _image(tmp_path)
    vol = tmp_path / "volumes" / "db"

    def failing(argv: list[str], **_: object) -> None:
        Path(argv[-1]).mkdir()  # cp got as far as the directory
        raise TemporaryProviderError("timed out after 300s: cp")

    monkeypatch.setattr(volumes, "host_run", failing)
    with pytest.raises(TemporaryProviderError):
        seed_volume(vol, str(root), "/usr/share/tmpl")
    assert list(vol.parent.iterdir()) == []


# ---- SeedPool: copies made ahead, taken by a rename


def _pool(tmp_path: Path) -> volumes.SeedPool:
    return volumes.SeedPool(tmp_path / "volumes-fs" / "seed-pool")


def test_a_ready_copy_of_the_pool_becomes_the_volume(tmp_path: Path) -> None:
    root = _image(tmp_path)
    pool = _pool(tmp_path)
    assert pool.fill(str(root), "/usr/share/tmpl")
    assert not pool.fill(str(root), "/usr/share/tmpl")  # one ready copy per source
    [entry] = pool.ready(str(root), "/usr/share/tmpl")
    assert (entry / SEEDED_MARKER).is_file() and (entry / "ibdata1").stat().st_blocks == 0
    inode = entry.stat().st_ino
    vol = tmp_path / "volumes-fs" / "cluster" / "db"
    assert seed_volume(vol, str(root), "/usr/share/tmpl", pool)
    assert vol.stat().st_ino == inode  # renamed, not copied
    assert (vol / "mysql" / "db.opt").read_text() == "x"
    assert pool.ready(str(root), "/usr/share/tmpl") == []
    # taking does not start the next copy (it would compete with the booting node's database for the disk)
    time.sleep(0.2)
    assert pool.ready(str(root), "/usr/share/tmpl") == []
    other = tmp_path / "volumes-fs" / "cluster" / "db2"
    assert seed_volume(other, str(root), "/usr/share/tmpl", pool)  # an empty pool: copied as before
    assert (other / SEEDED_MARKER).is_file()


def test_copies_are_per_image_and_seed(tmp_path: Path) -> None:
    root = _image(tmp_path)
    (root / "usr/share/other").mkdir(parents=True)
    pool = _pool(tmp_path)
    assert pool.fill(str(root), "/usr/share/tmpl")
    assert pool.ready(str(root), "/usr/share/other") == []
    assert not pool.fill(str(root), "/usr/share/none")  # the image has no such directory: nothing made
    vol = tmp_path / "volumes-fs" / "db"
    assert seed_volume(vol, str(root), "/usr/share/other", pool)
    assert sorted(p.name for p in vol.iterdir()) == [SEEDED_MARKER]
    assert len(pool.ready(str(root), "/usr/share/tmpl")) == 1  # the other seed's copy is still there


def test_the_pool_drops_dead_partials_and_copies_of_images_gone(tmp_path: Path) -> None:
    root = _image(tmp_path)
    gone = _image(tmp_path / "old")
    pool = _pool(tmp_path)
    assert pool.fill(str(gone), "/usr/share/tmpl")
    stale = pool.root / ".abc.seeding-dead"
    stale.mkdir()
    os.utime(stale, (time.time() - volumes.STALE_PARTIAL - 5,) * 2)
    fresh = pool.root / ".abc.seeding-live"  # another process is making it right now
    fresh.mkdir()
    shutil.rmtree(gone)
    assert pool.fill(str(root), "/usr/share/tmpl")
    names = sorted(p.name for p in pool.root.iterdir())
    assert ".abc.seeding-live" in names and ".abc.seeding-dead" not in names
    assert names == sorted([".abc.seeding-live", *(p.name for p in pool.ready(str(root), "/usr/share/tmpl")),
                            f"{pool.key(str(root), '/usr/share/tmpl')}.source"])


def test_refill_in_the_background_and_close_waits_for_it(tmp_path: Path) -> None:
    root = _image(tmp_path)
    pool = _pool(tmp_path)
    pool.refill_soon(str(root), "/usr/share/tmpl")
    pool.close()  # the copy under way is ended; nothing is left half-made
    assert not pool.root.exists() or [p for p in pool.root.iterdir() if ".seeding-" in p.name] == []
    made = pool.ready(str(root), "/usr/share/tmpl")
    pool.refill_soon(str(root), "/usr/share/tmpl")  # closed: ignored
    assert pool.ready(str(root), "/usr/share/tmpl") == made
    pool.resume()
    for entry in made:
        shutil.rmtree(entry)
    pool.refill_soon(str(root), "/usr/share/tmpl")
    deadline = time.monotonic() + 30
    while not pool.ready(str(root), "/usr/share/tmpl") and time.monotonic() < deadline:
        time.sleep(0.05)
    pool.close()
    assert len(pool.ready(str(root), "/usr/share/tmpl")) == 1


def test_a_pool_copy_is_made_at_idle_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _image(tmp_path)
    seen: list[list[str]] = []
    real = volumes.when_idle

    def spy(argv: list[str]) -> list[str]:
        seen.append(list(argv))
        return real(argv)

    monkeypatch.setattr(volumes, "when_idle", spy)
    assert _pool(tmp_path).fill(str(root), "/usr/share/tmpl")
    assert [a[0] for a in seen] == ["cp", "sync"]  # written out before a node's database fsyncs


def test_close_ends_a_copy_under_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _image(tmp_path)
    monkeypatch.setattr(volumes, "when_idle", lambda argv: ["sleep", "60"])  # a copy that takes a minute
    pool = _pool(tmp_path)
    pool.refill_soon(str(root), "/usr/share/tmpl")
    deadline = time.monotonic() + 10
    while pool._proc is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc = pool._proc
    assert proc is not None
    t0 = time.monotonic()
    pool.close()
    assert time.monotonic() - t0 < 10 and proc.poll() is not None  # ended, not waited for
    assert pool.ready(str(root), "/usr/share/tmpl") == []
    assert [p.name for p in pool.root.iterdir() if ".seeding-" in p.name] == []


def test_a_copy_that_cannot_be_renamed_there_is_copied_instead(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = _image(tmp_path)
    pool = _pool(tmp_path)
    assert pool.fill(str(root), "/usr/share/tmpl")
    real = os.rename

    def cross_device(src: object, dst: object) -> None:
        if "seed-pool" in str(src):
            raise OSError(18, "Invalid cross-device link")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(volumes.os, "rename", cross_device)
    vol = tmp_path / "elsewhere" / "db"
    assert seed_volume(vol, str(root), "/usr/share/tmpl", pool)
    assert (vol / SEEDED_MARKER).is_file() and (vol / "mysql" / "db.opt").read_text() == "x"
