"""``slurmpod containers import``: its refusals (before anything is created)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from slurmpod.lifecycle.containerimport import ContainerImportError, check_name, import_image, is_archive


def test_names_are_what_container_image_takes() -> None:
    assert check_name("tiny") == "tiny:latest"
    assert check_name("team/app:2") == "team/app:2"
    for bad in ("Bad:1", "nvcr.io#nvidia/pytorch:1", "/fsx/x.sqsh", "app:bad tag"):
        with pytest.raises(ContainerImportError) as err:
            check_name(bad)
        assert err.value.code == 2 and "--name" in str(err.value)


def _tar(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
    return path


def test_archives_and_root_filesystems_are_told_apart(tmp_path: Path) -> None:
    assert is_archive(_tar(tmp_path / "a.tar", ["manifest.json", "abc/layer.tar"]))
    assert is_archive(_tar(tmp_path / "o.tar", ["oci-layout", "index.json"]))
    assert not is_archive(_tar(tmp_path / "r.tar", ["./etc/os-release", "./bin/sh"]))
    (tmp_path / "junk.tar").write_text("not a tar")
    with pytest.raises(ContainerImportError, match="not a readable tar file"):
        is_archive(tmp_path / "junk.tar")


def test_missing_source_and_registry_not_running(tmp_path: Path) -> None:
    with pytest.raises(ContainerImportError, match="no such file"):
        import_image(tmp_path, tmp_path / "nope", "tiny:1")
    (tmp_path / "root").mkdir()
    with pytest.raises(ContainerImportError, match="registry of .* is not running"):
        import_image(tmp_path, tmp_path / "root", "tiny:1")

