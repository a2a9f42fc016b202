"""Shared fixtures for lifecycle tests: source trees, snapshots and a host-directory CommandRunner."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurmpod.lifecycle.snapshot import Snapshot, snapshot_source
from slurmpod.providers.base import CommandResult, TemporaryProviderError

MAPPED_PREFIXES = ("/opt/", "/var/log/")


class LocalDirRunner:
    """Runs argv on the host, rewriting node paths under ``/opt/`` and ``/var/log/`` into ``root``.

    A test double for a node's CommandRunner: enough for tar, install, env and bash, without root
    privileges or namespaces.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[list[str]] = []

    def map(self, arg: str) -> str:
        return f"{self.root}{arg}" if arg.startswith(MAPPED_PREFIXES) else arg

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        mapped = [self.map(a) for a in argv]
        self.calls.append(list(argv))
        try:
            proc = subprocess.run(
                mapped,
                input=input if input is not None else b"",
                capture_output=True,
                timeout=timeout,
                env=dict(env) if env is not None else dict(os.environ),
                cwd=self.map(cwd) if cwd else None,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise TemporaryProviderError(f"command timed out: {argv[0]}") from exc
        return CommandResult(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode())

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return [self.map(a) for a in argv]


def write_tree(root: Path, files: Mapping[str, str | bytes], executable: Sequence[str] = ()) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        path.chmod(0o755 if rel in executable else 0o644)
    return root


@pytest.fixture
def node_runner(tmp_path: Path) -> LocalDirRunner:
    root = tmp_path / "node"
    root.mkdir()
    return LocalDirRunner(root)


@pytest.fixture
def make_snapshot(tmp_path: Path):
    counter = iter(range(1000))

    def make(files: Mapping[str, str | bytes], executable: Sequence[str] = ()) -> Snapshot:
        src = write_tree(tmp_path / f"src{next(counter)}", files, executable)
        return snapshot_source(f"file://{src}", tmp_path / "snapshots")

    return make
