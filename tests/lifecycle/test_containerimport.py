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



def _fake_podman(tmp_path: Path, fail_imports: int, message: str) -> Path:
    """A podman stand-in: its first ``fail_imports`` imports fail with ``message``; every call is logged."""
    script = tmp_path / "podman"
    log, count = tmp_path / "calls", tmp_path / "failed"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case " $* " in *" import "*)
  n=$(cat {count} 2>/dev/null || echo 0)
  if [ "$n" -lt {fail_imports} ]; then echo $((n + 1)) > {count}; echo "Error: {message}" >&2; exit 125; fi ;;
esac
exit 0
""")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(("message", "retried"), [
    ('writing blob: adding layer with blob "sha256:f1": ApplyLayer stdout:  stderr:  signal: killed', True),
    ("writing blob: no space left on device", False),
])
def test_a_podman_helper_killed_from_outside_is_tried_once_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               message: str, retried: bool) -> None:
    import slurmpod.lifecycle.containerimport as ci

    monkeypatch.setattr(ci, "PODMAN", str(_fake_podman(tmp_path, 1, message)))
    monkeypatch.setattr(ci.ContainerRegistry, "address", lambda self: "10.9.0.1:5000")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "VERSION").write_text("v1\n")
    said: list[str] = []
    before = set(Path("/var/tmp").glob("slurmpod-cimport-*"))  # (another worker's import may be under way)
    if retried:
        assert import_image(tmp_path, tmp_path / "root", "tiny:1", progress=said.append) == "10.9.0.1:5000/tiny:1"
        assert any("trying again from a fresh storage (attempt 2 of 2)" in s for s in said), said
        calls = (tmp_path / "calls").read_text().splitlines()
        assert [c.split()[-2:] for c in calls if " push " in c] == [["--tls-verify=false", "10.9.0.1:5000/tiny:1"]]
    else:
        with pytest.raises(ContainerImportError, match="no space left on device"):
            import_image(tmp_path, tmp_path / "root", "tiny:1", progress=said.append)
        assert not any("trying again" in s for s in said)
        assert " push " not in (tmp_path / "calls").read_text()
    assert set(Path("/var/tmp").glob("slurmpod-cimport-*")) <= before
