"""Which accounting hosts rename the image's seed cluster (MariaDB's init-file) and which add their cluster with
sacctmgr: the seed is used whenever the image has one and the cluster's name can prefix Slurm's table names."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slurmpod.lifecycle.acctschema import SEED_FILE
from slurmpod.lifecycle.images import Image
from slurmpod.reconciler.accounting import _seed_sql
from slurmpod.slurm.accounting import MARIADB_TEMPLATE


def _image(tmp_path: Path, record: str | None) -> Image:
    template = tmp_path / "rootfs" / MARIADB_TEMPLATE.lstrip("/")
    (template / "mysql").mkdir(parents=True)
    if record is not None:
        (template / SEED_FILE).write_text(record)
    return Image(image_id="ami-0123456789abcdef0", release="1", root=str(tmp_path / "rootfs"), description="t")


def test_an_image_with_a_seed_cluster_renames_it_to_the_clusters_name(tmp_path: Path) -> None:
    image = _image(tmp_path, '{"tables": ["job_table", "assoc_table"], "cluster_id": 1}')
    sql = _seed_sql(image, "ML-Cluster-1").decode()  # slurm.conf's ClusterName is the lowercase name
    assert "`slurmpod_seed_job_table` TO `slurm_acct_db`.`ml-cluster-1_job_table`" in sql
    assert "UPDATE `slurm_acct_db`.cluster_table SET name='ml-cluster-1'" in sql


def test_older_images_and_long_names_keep_sacctmgr(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert _seed_sql(_image(tmp_path / "old", None), "c1") == b""  # built before recipe 13: no record, no warning
    image = _image(tmp_path / "new", '{"tables": ["assoc_usage_month_table"], "cluster_id": 1}')
    with caplog.at_level(logging.WARNING, logger="slurmpod.accounting"):
        assert _seed_sql(image, "a" * 41) == b""  # a41_assoc_usage_month_table would be 65 characters
    assert "the image's seed cluster is not used" in caplog.text
    assert _seed_sql(image, "a" * 40) != b""
