"""The accounting host's first-boot files (pure builders in ``slurm.accounting``)."""

from __future__ import annotations

from pathlib import Path

from slurmpod.providers.base import SEEDED_MARKER
from slurmpod.slurm import accounting as acct


def _by_path(files: list) -> dict:
    return {f.path: f for f in files}


def test_local_database_host_starts_everything_at_boot() -> None:
    conf = acct.render_slurmdbd_conf(acct.DBD_HOST, "pw-1")
    files = _by_path(acct.boot_files(b"k" * 1024, conf, password="pw-1"))
    key = files["/etc/munge/munge.key"]
    assert (key.mode, key.owner, key.content) == (0o400, "munge", b"k" * 1024)
    dbd = files[acct.SLURMDBD_CONF]
    assert (dbd.mode, dbd.owner) == (0o600, "slurm") and b"DbdHost=localhost\n" in dbd.content
    sql = files[acct.INIT_SQL]
    assert (sql.mode, sql.owner) == (0o600, "mysql") and b"IDENTIFIED BY 'pw-1'" in sql.content
    # init-file runs one statement per line
    assert all(line.endswith(b";") for line in sql.content.splitlines())
    cnf = files["/etc/mysql/mariadb.conf.d/70-slurmpod-accounting.cnf"].content
    assert f"init-file={acct.INIT_SQL}".encode() in cnf
    dropin = files["/etc/systemd/system/mariadb.service.d/50-slurmpod-accounting.conf"].content.decode()
    assert f"Requires={acct.SEED_UNIT}\nAfter={acct.SEED_UNIT}\n" in dropin
    assert "ExecStart=\nExecStart=/usr/sbin/mariadbd\n" in dropin  # no galera_recovery first
    seed = files[f"/etc/systemd/system/{acct.SEED_UNIT}"].content.decode()
    assert "DefaultDependencies=no\n" in seed and f"RequiresMountsFor={acct.MYSQL_DATADIR}\n" in seed
    assert f"ExecStart=/bin/sh -c '{acct.seed_datadir_script()}'\n" in seed
    for unit in (dropin, seed):
        assert "$" not in unit and "%" not in unit  # no unit expansions
    assert f"ConditionPathExists=!{acct.MYSQL_DATADIR}/{SEEDED_MARKER}\n" in seed  # the provider seeded it
    # the host boots only what it serves, and those as the boot starts (not after basic.target)
    assert files["/etc/systemd/system/default.target"].link == f"/etc/systemd/system/{acct.HOST_TARGET}"
    target = files[f"/etc/systemd/system/{acct.HOST_TARGET}"].content.decode()
    wanted = next(line for line in target.splitlines() if line.startswith("Wants=")).split("=", 1)[1].split()
    assert {"munge.service", "mariadb.service", "slurmdbd.service", "systemd-journald.service"} <= set(wanted)
    assert not {"multi-user.target", "basic.target", "sysinit.target", "ssh.service"} & set(wanted)
    for unit in ("munge", "mariadb", "slurmdbd"):
        early = files[f"/etc/systemd/system/{unit}.service.d/40-slurmpod-early.conf"].content.decode()
        assert "DefaultDependencies=no\n" in early
        assert "Conflicts=shutdown.target\nBefore=shutdown.target\n" in early  # stopped cleanly at shutdown
    early = files["/etc/systemd/system/mariadb.service.d/40-slurmpod-early.conf"].content.decode()
    assert "RuntimeDirectory=mysqld mariadbd\nRuntimeDirectoryPreserve=yes\n" in early  # tmpfiles may not have run
    wants = "/etc/systemd/system/multi-user.target.wants"
    assert files[f"{wants}/mariadb.service"].link == "/lib/systemd/system/mariadb.service"
    assert files["/etc/systemd/system/multi-user.target.wants/slurmdbd.service"].link == \
        "/etc/systemd/system/slurmdbd.service"


def test_external_database_host_has_no_local_mariadb() -> None:
    conf = acct.render_slurmdbd_conf(acct.DBD_HOST, "pw", storage_host="10.0.0.9")
    paths = set(_by_path(acct.boot_files(b"k", conf, password=None)))
    assert acct.SLURMDBD_CONF in paths and acct.INIT_SQL not in paths
    assert not any("mariadb" in p or "mysql" in p for p in paths)
    target = _by_path(acct.boot_files(b"k", conf, password=None))[f"/etc/systemd/system/{acct.HOST_TARGET}"]
    assert b"slurmdbd.service" in target.content and b"mariadb" not in target.content


def test_seed_script_leaves_an_initialised_datadir_alone() -> None:
    script = acct.seed_datadir_script()
    assert f"test -e {acct.INIT_MARKER} ||" in script  # the marker short-circuits the wipe
    # a volume the provider made as the template's copy before the boot is not copied again
    assert f"test -e {acct.MYSQL_DATADIR}/{SEEDED_MARKER} ||" in script
    assert f"! test -d {acct.MARIADB_TEMPLATE}/mysql ||" in script  # no template: nothing is removed
    assert "'" not in script  # it is embedded in single quotes in the unit


def test_slurmdbd_pid_file_follows_the_images_unit(tmp_path: Path) -> None:
    """Debian 13 on: the unit runs slurmdbd as the slurm user with RuntimeDirectory=slurmdbd, so its pid file goes
    there (in /run it logs "Unable to open pidfile"); Debian 12's unit starts it as root, and so does the legacy
    image: /run."""
    from slurmpod.lifecycle.images import BUILTIN, Image
    from slurmpod.reconciler.accounting import _pid_file

    def image(unit: str | None) -> Image:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        (root / "etc/systemd/system").mkdir(parents=True)
        if unit is not None:
            (root / "etc/systemd/system/slurmdbd.service").write_text(unit)
        return Image("ami-0123456789abcdef0", "1", str(root), "test", kind="rootfs")

    trixie = "[Service]\nType=simple\nUser=slurm\nRuntimeDirectory=slurmdbd\nRuntimeDirectoryMode=0755\n"
    bookworm = "[Service]\nType=simple\nPIDFile=/run/slurmdbd.pid\n"
    assert _pid_file(image(trixie)) == acct.SLURMDBD_RUNTIME_PID_FILE == "/run/slurmdbd/slurmdbd.pid"
    assert _pid_file(image(bookworm)) == acct.SLURMDBD_PID_FILE == "/run/slurmdbd.pid"
    assert _pid_file(image(None)) == acct.SLURMDBD_PID_FILE
    assert _pid_file(BUILTIN) == acct.SLURMDBD_PID_FILE
    conf = acct.render_slurmdbd_conf(acct.DBD_HOST, "pw", pid_file=_pid_file(image(trixie)))
    assert "PidFile=/run/slurmdbd/slurmdbd.pid\n" in conf


def test_ready_check_adds_the_cluster_before_slurmctld_starts() -> None:
    """The booted host's one ready command ends by adding slurm.conf's ClusterName through the local slurmdbd (so
    slurmctld's first start finds its tables); that step never fails the check."""
    script = acct.booted_ready_argv("ab" * 32, 30, "my-cluster")[2]
    ready, _, add = script.partition(f"touch {acct.INIT_MARKER} || exit 1; ")
    assert "(exec 3<>/dev/tcp/127.0.0.1/6819)" in ready and "SELECT" not in ready
    assert add == acct.add_cluster_script("my-cluster")
    assert f"SLURM_CONF={acct.SACCTMGR_CONF} timeout 20 sacctmgr -i add cluster my-cluster >/dev/null 2>&1; exit 0" \
        in add
    assert "ClusterName=my-cluster\\nSlurmctldHost=localhost\\n" in add
    assert "AccountingStorageType=accounting_storage/slurmdbd\\nAccountingStorageHost=localhost\\n" in add
    assert add.startswith("printf 'ClusterName=my-cluster\\n") and "AccountingStoragePort=6819\\n' > " in add


def test_ready_check_of_a_host_whose_database_made_the_cluster_adds_nothing() -> None:
    """With the image's seed cluster renamed by MariaDB's init-file, the ready command runs no sacctmgr."""
    script = acct.booted_ready_argv("ab" * 32, 30, None)[2]
    assert script.endswith(f"touch {acct.INIT_MARKER} || exit 1; exit 0")
    assert "sacctmgr" not in script


_SEED = acct.SeedCluster(tables=("assoc_table", "job_table", "last_ran_table"), cluster_id=True)


def test_seed_cluster_sql_renames_the_seed_cluster_idempotently() -> None:
    sql = acct.seed_cluster_sql(_SEED, "prod_1").decode()
    lines = sql.splitlines()
    assert all(line.endswith(";") for line in lines)  # init-file: a statement per line
    # one atomic statement for every table; IF EXISTS: the next start (nothing left to rename) changes nothing
    assert lines[0] == ("RENAME TABLE IF EXISTS "
                        "`slurm_acct_db`.`slurmpod_seed_assoc_table` TO `slurm_acct_db`.`prod_1_assoc_table`, "
                        "`slurm_acct_db`.`slurmpod_seed_job_table` TO `slurm_acct_db`.`prod_1_job_table`, "
                        "`slurm_acct_db`.`slurmpod_seed_last_ran_table` TO `slurm_acct_db`.`prod_1_last_ran_table`;")
    # Slurm names its tables in double quotes in table_defs_table; only the seed's rows match
    assert "SET table_name=REPLACE(table_name, '\"slurmpod_seed_', '\"prod_1_')" in lines[1]
    assert lines[1].endswith("WHERE table_name LIKE '\"slurmpod_seed\\_%';")
    assert "WHERE name='slurmpod_seed' OR cluster='slurmpod_seed';" in lines[2]
    assert lines[3].startswith("UPDATE `slurm_acct_db`.cluster_table SET name='prod_1', creation_time=UNIX_TIMESTAMP()")
    assert ", id=FLOOR(2 + RAND() * 4094) WHERE name='slurmpod_seed';" in lines[3]


def test_seed_cluster_sql_without_cluster_ids_and_bad_names() -> None:
    import pytest

    old = acct.seed_cluster_sql(acct.SeedCluster(tables=("job_table",), cluster_id=False), "c").decode()
    assert "id=" not in old.splitlines()[3]  # Slurm 22.05's cluster_table has no id
    assert "`slurm_acct_db`.`my-cluster_job_table`" in acct.seed_cluster_sql(_SEED, "my-cluster").decode()
    for bad in ("my.cluster", "Upper", "x" * 60, "a'b", "a`b"):  # each would not be a plain, short table name
        with pytest.raises(ValueError, match="cannot be written into SQL"):
            acct.seed_cluster_sql(_SEED, bad)
    with pytest.raises(ValueError, match="no tables"):
        acct.seed_cluster_sql(acct.SeedCluster(tables=(), cluster_id=True), "c")
    with pytest.raises(ValueError, match="cannot be written into SQL"):
        acct.seed_cluster_sql(acct.SeedCluster(tables=("job_table`; DROP",), cluster_id=True), "c")


def test_seed_sql_follows_the_slurm_user_in_the_init_file() -> None:
    """MariaDB stops running an init-file at its first failing statement: the slurm user comes first."""
    conf = acct.render_slurmdbd_conf(acct.DBD_HOST, "pw-1")
    seed = acct.seed_cluster_sql(_SEED, "c1")
    sql = _by_path(acct.boot_files(b"k" * 1024, conf, password="pw-1", seed_sql=seed))[acct.INIT_SQL].content
    assert sql == acct.slurm_user_sql("pw-1") + seed
    plain = _by_path(acct.boot_files(b"k" * 1024, conf, password="pw-1"))[acct.INIT_SQL].content
    assert plain == acct.slurm_user_sql("pw-1")
