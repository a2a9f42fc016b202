"""slurmpod.files: 0600 files in 0700 directories, replaced atomically under a flock."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from slurmpod.files import JsonFile, secret_file, write_atomic


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_json_file_modes_and_round_trip(tmp_path: Path) -> None:
    doc = JsonFile(tmp_path / "d" / "x.json")
    assert doc.read({"empty": True}) == {"empty": True}
    with doc.locked():
        doc.write({"a": 1})
    assert doc.read() == {"a": 1}
    assert _mode(doc.path) == 0o600 and _mode(doc.path.parent) == 0o700
    assert sorted(p.name for p in doc.path.parent.iterdir()) == [".lock", "x.json"]  # no temp file left


def test_concurrent_read_modify_write_loses_nothing(tmp_path: Path) -> None:
    doc = JsonFile(tmp_path / "counter.json")

    def bump() -> None:
        for _ in range(20):
            with doc.locked():
                data = doc.read({"n": 0})
                data["n"] += 1
                doc.write(data)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert doc.read() == {"n": 80}


def test_write_atomic_replaces_and_secret_file_creates_once(tmp_path: Path) -> None:
    p = tmp_path / "k"
    write_atomic(p, b"one")
    write_atomic(p, b"two")
    assert p.read_bytes() == b"two" and _mode(p) == 0o600
    calls: list[int] = []
    key = tmp_path / "munge.key"
    assert secret_file(key, lambda: calls.append(1) or b"secret") == b"secret"
    assert secret_file(key, lambda: calls.append(1) or b"other") == b"secret"
    assert calls == [1] and _mode(key) == 0o600
