"""The accounting host's first-boot files (pure builders in ``slurm.accounting``)."""

from __future__ import annotations

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
    assert "ExecStartPre=+/bin/sh -c '" in dropin and "$" not in dropin and "%" not in dropin  # no unit expansions
    wants = "/etc/systemd/system/multi-user.target.wants"
    assert files[f"{wants}/mariadb.service"].link == "/lib/systemd/system/mariadb.service"
    assert files["/etc/systemd/system/multi-user.target.wants/slurmdbd.service"].link == \
        "/etc/systemd/system/slurmdbd.service"


def test_external_database_host_has_no_local_mariadb() -> None:
    conf = acct.render_slurmdbd_conf(acct.DBD_HOST, "pw", storage_host="10.0.0.9")
    paths = set(_by_path(acct.boot_files(b"k", conf, password=None)))
    assert acct.SLURMDBD_CONF in paths and acct.INIT_SQL not in paths
    assert not any("mariadb" in p or "mysql" in p for p in paths)


def test_seed_script_leaves_an_initialised_datadir_alone() -> None:
    script = acct.seed_datadir_script()
    assert f"test -e {acct.INIT_MARKER} ||" in script  # the marker short-circuits the wipe
    assert f"! test -d {acct.MARIADB_TEMPLATE}/mysql ||" in script  # no template: nothing is removed
    assert "'" not in script  # it is embedded in single quotes in the unit
