"""``write_files``: one tar stream, extracted by a real GNU tar (here into a scratch root through a fake runner)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurmpod.providers.base import CommandResult, NodeFile
from slurmpod.providers.nodefiles import NodeFilesError, archive, write_files


class ChrootedTar:
    """Runs the command on this host with ``-C /`` pointed at ``root`` (a test fake of a node's runner)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, input: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        argv = [str(self.root) if a == "/" else a for a in argv]
        self.calls.append(argv)
        p = subprocess.run(argv, input=input, capture_output=True, timeout=timeout, check=False)
        return CommandResult(p.returncode, p.stdout.decode(), p.stderr.decode())

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return list(argv)


def test_files_dirs_and_links_in_one_command(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir(mode=0o755)
    (tmp_path / "root" / "link").symlink_to("/etc/passwd")  # replaced, never written through
    r = ChrootedTar(tmp_path)
    write_files(r, [NodeFile("/root/link", b"new\n", 0o600), NodeFile("/a/b/c", b"\x00\x01", 0o400),
                    NodeFile("/root/l2", link="/etc/hosts")], dirs=[("/root", 0o700, "root")])
    assert len(r.calls) == 1
    assert (tmp_path / "root/link").read_bytes() == b"new\n" and not (tmp_path / "root/link").is_symlink()
    assert os.readlink(tmp_path / "root/l2") == "/etc/hosts"
    assert (tmp_path / "a/b/c").read_bytes() == b"\x00\x01"
    assert (tmp_path / "a/b/c").stat().st_mode & 0o777 == 0o400
    assert (tmp_path / "root").stat().st_mode & 0o777 == 0o700


def test_a_directory_that_is_a_symlink_stays_one(tmp_path: Path) -> None:
    """Images link /etc/slurm to /opt/slurm/etc: a directory entry (or a file below it) keeps the link and writes
    into its target, as ``install -d`` would (tar alone replaced the link with an empty directory)."""
    (tmp_path / "opt/slurm/etc").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/slurm").symlink_to("../opt/slurm/etc")
    write_files(ChrootedTar(tmp_path), [NodeFile("/etc/slurm/cgroup.conf", b"x\n", 0o644)],
                dirs=[("/etc/slurm", 0o755, "root")])
    assert (tmp_path / "etc/slurm").is_symlink()
    assert (tmp_path / "opt/slurm/etc/cgroup.conf").read_bytes() == b"x\n"


def test_nothing_to_write_runs_nothing(tmp_path: Path) -> None:
    r = ChrootedTar(tmp_path)
    write_files(r, [])
    assert r.calls == []


def test_bad_paths_are_refused_before_anything_runs() -> None:
    for bad in ("relative/x", "/a/../b", "/a\nb"):
        with pytest.raises(ValueError):
            archive([NodeFile(bad, b"x")])


def test_a_tar_failure_is_an_error_without_contents(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a file where a directory must go")
    with pytest.raises(NodeFilesError) as exc:
        write_files(ChrootedTar(tmp_path), [NodeFile("/a/b", b"s3cret")])
    assert "s3cret" not in str(exc.value)
