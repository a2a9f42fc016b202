"""Accounting: slurmdbd + MariaDB on a per-cluster service host (``slurmpod server --accounting local``).

The integration tests build a real cluster and prove ``sacct`` lists a finished job, that the accounting host
is not a controller, that no password leaks into process lists or the server log, that a restarted server
re-adopts the host, and that deleting the cluster removes it. The unit tests cover the pure builders.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from slurmpod.lifecycle.acctschema import SEED_FILE
from slurmpod.providers.base import SEEDED_MARKER
from slurmpod.slurm.accounting import (
    HOST_TARGET,
    MARIADB_TEMPLATE,
    MYSQL_DATADIR,
    accounting_instance_id,
    background_argv,
    client_argv,
    install_db_argv,
    mariadbd_argv,
    render_slurmdbd_conf,
    slurm_user_sql,
)
from tests.integration.conftest import in_node
from tests.serverproc import ServerProcess, seed_groups, wait_status

# ---- unit tests of the pure builders ---------------------------------------------------------------------


def test_slurmdbd_conf() -> None:
    conf = render_slurmdbd_conf("ip-10-231-0-5", "s3cr3t-_x")
    assert "DbdHost=ip-10-231-0-5\n" in conf
    assert "StorageHost=localhost\n" in conf
    assert "StoragePass=s3cr3t-_x\n" in conf
    assert "StorageType=accounting_storage/mysql\n" in conf
    assert "DbdPort=6819\n" in conf
    with pytest.raises(ValueError):
        render_slurmdbd_conf("host.example.com", "x")  # DbdHost must be the short hostname
    for bad in ("", "has space", "has#hash", "quote'"):
        with pytest.raises(ValueError):
            render_slurmdbd_conf("h1", bad)


def test_no_secret_in_argv() -> None:
    pw = "pw-abcdef"
    argvs = [install_db_argv(), mariadbd_argv(), client_argv(), background_argv("/l", mariadbd_argv())]
    assert all(pw not in " ".join(a) for a in argvs)
    sql = slurm_user_sql(pw).decode()
    assert f"IDENTIFIED BY '{pw}'" in sql and "IF NOT EXISTS" in sql
    with pytest.raises(ValueError):
        slurm_user_sql("a'; DROP DATABASE x; --")


def test_instance_id_is_deterministic() -> None:
    a = accounting_instance_id("abc123def456")
    assert a == accounting_instance_id("abc123def456") != accounting_instance_id("abc123def457")
    assert a.startswith("i-") and len(a) == 19


# ---- real daemons -----------------------------------------------------------------------------------------


@pytest.fixture
def acct_server(local_server: ServerProcess) -> ServerProcess:
    """The shared real-server fixture (accounting is on by default), skipped without Debian's accounting packages."""
    for tool in ("mariadbd", "slurmdbd", "mariadb-install-db"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            pytest.skip(f"{tool} not installed (apt-get install -y slurmdbd mariadb-server)")
    return local_server


def _sacct_state(state: Path, cluster: str, job: str) -> str:
    r = in_node(state, cluster, None, "sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State,NodeList")
    return r.stdout.strip() if r.returncode == 0 else ""


def _wait_sacct(state: Path, cluster: str, job: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    row = ""
    while time.monotonic() < deadline:
        row = _sacct_state(state, cluster, job)
        if "COMPLETED" in row:
            return row
        time.sleep(0.5)
    raise AssertionError(f"sacct never listed job {job} as COMPLETED; last: {row!r}")


@pytest.mark.integration
def test_sacct_lists_finished_job(acct_server: ServerProcess) -> None:
    from slurmpod.providers.local.provider import LocalProvider

    state = acct_server.state_dir
    c = acct_server.client()
    t0 = time.monotonic()
    c.create_cluster(ClusterName="acct-1", InstanceGroups=seed_groups(1))
    d = wait_status(c, "acct-1", {"InService", "Failed"}, timeout=180)
    print(f"InService with accounting after {time.monotonic() - t0:.1f}s")
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    cid = d["ClusterArn"].rsplit("/", 1)[1]

    # slurm.conf points at the accounting host, which is its own instance (not a controller)
    conf = in_node(state, "acct-1", None, "cat", "/etc/slurm/slurm.conf").stdout
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    host_ip = next(line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("AccountingStorageHost="))
    provider = LocalProvider(state)
    iid = accounting_instance_id(cid)
    inst = {i.instance_id: i for i in provider.list_instances(cid)}[iid]
    assert inst.alive and inst.ip == host_ip and inst.group == "accounting"
    nodes = c.list_cluster_nodes(ClusterName="acct-1")["ClusterNodeSummaries"]
    hostnames = {n["PrivateDnsHostname"] for n in nodes}
    assert inst.hostname not in hostnames and iid not in conf

    # a job runs and sacct (on the controller) lists it as COMPLETED
    r = in_node(state, "acct-1", None, "bash", "-c", "cd /home && sbatch --parsable --wrap='hostname; sleep 1'")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    row = _wait_sacct(state, "acct-1", job)
    print("sacct:", row)
    # the accounting host added the cluster before slurmctld's first start, and that start's registration still
    # recorded where slurmctld listens (slurmdbd sends it association changes there)
    r = in_node(state, "acct-1", None, "sacctmgr", "-n", "-P", "show", "cluster",
                "format=cluster,controlhost,controlport")
    ctl_ip = next(line.split("(", 1)[1].rstrip(")") for line in conf.splitlines() if line.startswith("SlurmctldHost="))
    assert f"acct-1|{ctl_ip}|6817" in r.stdout.splitlines(), r.stdout

    # the password is in a 0600 file only: not in any process list, not in the server log
    pw_file = state / "clusters" / cid / "accounting-db.pass"
    assert pw_file.stat().st_mode & 0o777 == 0o600
    password = pw_file.read_text().strip()
    runner = provider.runner(cid, iid)
    ps_node = runner.run(["ps", "-eo", "args"], timeout=10).stdout
    assert "mariadbd" in ps_node and "slurmdbd" in ps_node
    assert password not in ps_node
    assert password not in (state / "server.log").read_text()
    ls = runner.run(["stat", "-c", "%a %U", "/etc/slurm/slurmdbd.conf"], timeout=10).stdout.split()
    assert ls == ["600", "slurm"]
    # where the host's boot brings MariaDB up from the image's template (a systemd image that has one), its
    # database volume was made by the provider as the template's copy before the boot (the seed unit copied nothing)
    template_boot = runner.run(["sh", "-c", f"test -d /run/systemd/system && test -d {MARIADB_TEMPLATE}/mysql"],
                               timeout=10).returncode == 0
    seeded = runner.run(["test", "-e", f"{MYSQL_DATADIR}/{SEEDED_MARKER}"], timeout=10).returncode == 0
    assert seeded == template_boot
    if template_boot:  # it booted only what it serves (HOST_TARGET), and its daemons still log to the journal
        default = runner.run(["systemctl", "get-default"], timeout=10).stdout.strip()
        assert default == HOST_TARGET
        assert "active" not in runner.run(["systemctl", "is-active", "ssh.socket", "sockets.target", "basic.target"],
                                          timeout=10).stdout.split()
        journal = runner.run(["journalctl", "-u", "mariadb", "--no-pager"], timeout=10).stdout
        assert "ready for connections" in journal, journal[-500:]
        # the image's seed cluster became this one (MariaDB's init-file renamed its tables), which slurmdbd took as
        # it was: no seed table left, all of the seed's renamed, and no table definition changed since the cluster
        # was created (slurmdbd ALTERs a table whose recorded definition it does not find)
        seed = json.loads(runner.run(["cat", f"{MARIADB_TEMPLATE}/{SEED_FILE}"], timeout=10).stdout or "null")
        if seed is not None:
            query = ("SELECT table_name FROM information_schema.tables WHERE table_schema='slurm_acct_db' AND "
                     "(table_name LIKE 'slurmpod%' OR table_name LIKE 'acct-1\\_%');\n"
                     "SELECT COUNT(*) FROM slurm_acct_db.table_defs_table WHERE mod_time >= (SELECT creation_time "
                     "FROM slurm_acct_db.cluster_table WHERE name='acct-1');\n"
                     "SELECT name FROM slurm_acct_db.cluster_table;\n")
            r = runner.run(client_argv(), input=query.encode(), timeout=20)
            assert r.returncode == 0, r.stderr
            *tables, altered, clusters = r.stdout.split()
            assert set(tables) == {f"acct-1_{t}" for t in seed["tables"]}
            assert (altered, clusters) == ("0", "acct-1"), r.stdout

    # a restarted server re-adopts the accounting host (same address) and accounting keeps working
    acct_server.kill9()
    acct_server.start()
    r = in_node(state, "acct-1", None, "bash", "-c", "cd /home && sbatch --parsable --wrap=true")
    assert r.returncode == 0, r.stderr
    _wait_sacct(state, "acct-1", r.stdout.strip().split(";")[0])
    assert {i.instance_id: i for i in provider.list_instances(cid)}[iid].ip == host_ip

    # deleting the cluster removes the accounting host, its volume and the password file
    c.delete_cluster(ClusterName="acct-1")
    wait_status(c, "acct-1", {"gone"}, timeout=120)
    assert iid not in {i.instance_id for i in provider.list_instances(cid)}
    assert not pw_file.exists()


@pytest.mark.integration
def test_service_readopts_and_keeps_data(local_state: Path) -> None:
    """No server: ensure() twice (cached), from a new service object (re-adopt), after the instance is gone
    (relaunch on the same volume: the data survives, no re-initialisation), and after a crash mid-init."""
    import secrets

    from slurmpod.providers.local.provider import LocalProvider
    from slurmpod.reconciler.accounting import AccountingService
    from slurmpod.slurm.accounting import INIT_MARKER, MYSQL_PID_FILE

    for tool in ("mariadbd", "slurmdbd", "mariadb-install-db"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            pytest.skip(f"{tool} not installed (apt-get install -y slurmdbd mariadb-server)")
    provider = LocalProvider(local_state)
    cid, key = "acct" + secrets.token_hex(4), secrets.token_bytes(1024)
    svc = AccountingService(provider, local_state)
    iid = svc.instance_id(cid)
    sql = ["mariadb", "--no-defaults", "--socket=/run/mysqld/mysqld.sock", "-uroot", "--skip-ssl", "-N", "-B"]
    try:
        t0 = time.monotonic()
        cfg = svc.ensure(cid, "acct", key)
        print(f"first ensure: {time.monotonic() - t0:.2f}s")
        assert svc.alive(cid) and svc.ensure(cid, "acct", key) == cfg
        r = provider.runner(cid, iid)
        assert r.run([*sql], input=b"CREATE TABLE slurm_acct_db.probe (x INT); INSERT INTO slurm_acct_db.probe "
                     b"VALUES (42);", timeout=30).returncode == 0

        fresh = AccountingService(provider, local_state)  # a restarted server: nothing cached
        t0 = time.monotonic()
        assert fresh.ensure(cid, "acct", key) == cfg
        print(f"re-adopt: {time.monotonic() - t0:.2f}s")

        provider.terminate(cid, iid)
        assert not fresh.alive(cid)
        t0 = time.monotonic()
        cfg2 = fresh.ensure(cid, "acct", key)
        print(f"relaunch on the existing volume: {time.monotonic() - t0:.2f}s")
        r = provider.runner(cid, iid)
        out = r.run([*sql], input=b"SELECT x FROM slurm_acct_db.probe;", timeout=30)
        assert out.stdout.strip() == "42", out.stderr
        assert fresh.alive(cid) and cfg2.port == 6819

        # a crash between mariadb-install-db and the first start: no marker -> the datadir is rebuilt
        pid = r.run(["cat", MYSQL_PID_FILE], timeout=10).stdout.strip()
        r.run(["kill", "-9", pid], timeout=10)
        r.run(["rm", "-f", INIT_MARKER], timeout=10)
        fresh2 = AccountingService(provider, local_state)
        fresh2.ensure(cid, "acct", key)
        assert r.run(["test", "-e", INIT_MARKER], timeout=10).returncode == 0
        assert r.run([*sql], input=b"SELECT 1;", timeout=30).stdout.strip() == "1"
    finally:
        svc.teardown(cid)
        provider.teardown_cluster(cid)


@pytest.mark.integration
def test_dead_accounting_host_is_restarted(acct_server: ServerProcess) -> None:
    """Every process of the accounting host killed: the health check brings it back (same address, same
    database volume), records an event, and jobs run meanwhile land in sacct once slurmdbd is back."""
    import json
    import os
    import signal
    import subprocess

    state = acct_server.state_dir
    c = acct_server.client()
    c.create_cluster(ClusterName="acct", InstanceGroups=seed_groups(1))
    d = wait_status(c, "acct", {"InService", "Failed"}, timeout=180)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    cid = d["ClusterArn"].rsplit("/", 1)[1]
    r = in_node(state, "acct", None, "bash", "-c", "cd /home && sbatch --parsable --wrap=true")
    first = r.stdout.strip().split(";")[0]
    _wait_sacct(state, "acct", first)

    meta = json.loads(next(state.glob(f"local/**/{accounting_instance_id(cid)}/meta.json")).read_text())
    # the accounting host is a systemd node of the default image: its database and slurmdbd are units
    units = subprocess.run(["nsenter", "-t", str(meta["holder_pid"]), "-a", "--", "systemctl", "is-active",
                            "mariadb", "slurmdbd", "munge"], capture_output=True, text=True, timeout=30)
    assert units.stdout.split() == ["active"] * 3, (units.stdout, units.stderr)
    # the image's database template holds slurmdbd's tables: its first start is its only one (no fatal first start
    # creating the database, no restart by systemd)
    log = subprocess.run(["nsenter", "-t", str(meta["holder_pid"]), "-a", "--", "cat", "/var/log/slurm/slurmdbd.log"],
                         capture_output=True, text=True, timeout=30).stdout
    assert log.count("slurmdbd version") == 1 and "fatal" not in log, log
    # it could write its pid file (Debian 13 on: in the unit's RuntimeDirectory, as the slurm user cannot write /run)
    assert "Unable to open pidfile" not in log, log
    pid = subprocess.run(["nsenter", "-t", str(meta["holder_pid"]), "-a", "--", "bash", "-c",
                          'cat "$(sed -n "s/^PidFile=//p" /etc/slurm/slurmdbd.conf)"'],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    assert pid.isdigit(), pid
    os.kill(meta["holder_pid"], signal.SIGKILL)
    r = in_node(state, "acct", None, "bash", "-c", "cd /home && sbatch --parsable --wrap=true")
    assert r.returncode == 0, r.stderr  # slurmctld queues accounting records while slurmdbd is away
    second = r.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 90
    while True:
        texts = [e["Description"] for e in c.list_cluster_events(ClusterName="acct", MaxResults=100)["Events"]]
        if any("accounting host of Cluster acct was down; slurmdbd runs again" in t for t in texts):
            break
        assert time.monotonic() < deadline, texts
        time.sleep(0.5)
    print("\n" + next(t for t in texts if "runs again" in t))
    print("sacct:", _wait_sacct(state, "acct", second, timeout=90))
    assert first in _sacct_state(state, "acct", first)  # the earlier job's row survived on the volume
