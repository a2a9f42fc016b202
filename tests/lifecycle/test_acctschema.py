"""acctschema.prepare_schema without an image: nothing to prepare (a real image is checked by
test_image_build_integration.py, and every accounting test boots from a prepared template)."""

from __future__ import annotations

from pathlib import Path

from slurmpod.lifecycle.acctschema import SCHEMA_MARK, prepare_schema


def test_a_tree_without_template_or_slurmdbd_is_left_alone(tmp_path: Path) -> None:
    assert prepare_schema(tmp_path) == 0
    template = tmp_path / "usr/share/slurmpod/mariadb-datadir"
    (template / "mysql").mkdir(parents=True)
    assert prepare_schema(tmp_path) == 0  # no slurmdbd in the image
    assert sorted(p.name for p in template.iterdir()) == ["mysql"]


def test_a_prepared_template_is_not_prepared_again(tmp_path: Path) -> None:
    template = tmp_path / "usr/share/slurmpod/mariadb-datadir"
    (template / "mysql").mkdir(parents=True)
    (tmp_path / "usr/sbin").mkdir(parents=True)
    (tmp_path / "usr/sbin/slurmdbd").write_text("")
    (template / SCHEMA_MARK).write_text("12\n")
    assert prepare_schema(tmp_path) == 12


def test_a_failure_names_the_step_and_leaves_nothing_running(tmp_path: Path) -> None:
    import os

    import pytest

    from slurmpod.lifecycle.rootfs import RootfsError

    if os.geteuid() != 0:
        pytest.skip("needs root (unshare)")
    for d in ("usr/share/slurmpod/mariadb-datadir/mysql", "usr/sbin", "proc", "dev", "run", "tmp"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "usr/sbin/slurmdbd").write_text("")
    with pytest.raises(RootfsError, match="preparing slurmdbd's schema in the image failed"):
        prepare_schema(tmp_path)  # the tree has no bash to chroot into
    assert not (tmp_path / "usr/share/slurmpod/mariadb-datadir" / SCHEMA_MARK).exists()
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()  # the namespace's mounts went with it


def test_the_seed_cluster_record_is_read_from_the_template(tmp_path: Path) -> None:
    from slurmpod.lifecycle.acctschema import SEED_FILE, seed_cluster
    from slurmpod.slurm.accounting import SeedCluster

    template = tmp_path / "usr/share/slurmpod/mariadb-datadir"
    template.mkdir(parents=True)
    assert seed_cluster(tmp_path) is None  # an image made before the seed cluster: sacctmgr adds the cluster
    record = template / SEED_FILE
    record.write_text('{"tables": ["job_table", "assoc_table"], "cluster_id": 1}\n')  # mariadb's JSON_OBJECT line
    assert seed_cluster(tmp_path) == SeedCluster(tables=("job_table", "assoc_table"), cluster_id=True)
    record.write_text('{"tables": ["job_table"], "cluster_id": 0}\n')
    assert seed_cluster(tmp_path) == SeedCluster(tables=("job_table",), cluster_id=False)
    for broken in ("", "{", '{"tables": null, "cluster_id": 1}', '{"tables": []}', '{"tables": [], "cluster_id": 1}',
                   "[1]"):
        record.write_text(broken)
        assert seed_cluster(tmp_path) is None, broken
