"""The server's per-cluster files: slurm.conf saved atomically, also by several nodes' boot phases at once."""

from __future__ import annotations

import threading
from pathlib import Path

from slurmpod.reconciler.slurm_runtime.files import ClusterFiles


def test_concurrent_saves_of_one_clusters_conf_all_succeed(tmp_path: Path) -> None:
    # the controllers of an HA cluster reach their daemons phase together: each saves the rendered slurm.conf
    files = ClusterFiles(tmp_path)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(n: int) -> None:
        start.wait()
        try:
            for i in range(50):
                files.save_conf("c1", f"# writer {n} save {i}\nClusterName=c1\n")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    saved = files.saved_conf("c1")
    assert saved is not None and saved.endswith("save 49\nClusterName=c1\n")
    assert sorted(p.name for p in (tmp_path / "c1").iterdir()) == ["slurm.conf"]


def test_a_saved_conf_replaces_the_last_one(tmp_path: Path) -> None:
    files = ClusterFiles(tmp_path)
    assert files.saved_conf("c2") is None
    files.save_conf("c2", "A\n")
    files.save_conf("c2", "B\n")
    assert files.saved_conf("c2") == "B\n"
