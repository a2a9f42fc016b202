"""A new volume made on the host as a whole copy of a directory of the node's image (``VolumeMount.seed``): the
accounting host's MariaDB datadir starts as the image's template before the host boots."""

from __future__ import annotations

import os
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
