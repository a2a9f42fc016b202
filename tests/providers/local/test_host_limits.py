"""Host kernel limits systemd nodes need: raised when lower, never lowered, unwritable ones logged and left."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmpod.providers.local.sysnode import HOST_LIMITS, raise_host_limits


def _tree(tmp_path: Path, values: dict[str, str]) -> Path:
    for key, value in values.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_text(value)
    return tmp_path


def test_raises_only_what_is_lower(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _tree(tmp_path, {"fs/inotify/max_user_instances": "128\n", "fs/inotify/max_user_watches": "9999999\n",
                            "kernel/keys/maxkeys": "200\n", "kernel/keys/maxbytes": "20000\n"})
    changed = raise_host_limits(root)
    assert changed == ["fs.inotify.max_user_instances 128 -> 8192", "kernel.keys.maxkeys 200 -> 2000",
                       "kernel.keys.maxbytes 20000 -> 2000000"]
    assert (root / "fs/inotify/max_user_watches").read_text() == "9999999\n"  # never lowered
    assert raise_host_limits(root) == []  # idempotent
    for key, want in HOST_LIMITS.items():
        assert int((root / key).read_text()) >= want


def test_unwritable_limits_are_logged_and_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert raise_host_limits(tmp_path / "missing") == []
    assert "cannot raise fs.inotify.max_user_instances" in caplog.text
