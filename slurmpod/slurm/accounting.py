"""Pure builders for a cluster's accounting host: slurmdbd.conf and the MariaDB command lines.

Mechanism (reference/local-slurm.md §6, pitfalls 6 and 24; tested with Debian's MariaDB 10.11 and
slurmdbd 22.05): MariaDB runs as an ordinary background process (no systemd), ``--no-defaults`` so no
``/etc/mysql`` file of the image matters, listening on the node's loopback and on the socket
``/run/mysqld/mysqld.sock`` (the node's private ``/run``). root uses socket authentication; slurmdbd logs
in as ``slurm`` with a password over that socket (``StorageHost=localhost``). ``slurmdbd.conf`` is 0600
and owned by slurm, and ``DbdHost`` must be the node's short hostname.

Nothing here runs anything: ``slurmpod.reconciler.accounting`` drives these inside the node. Secrets
never appear in an argv built here: SQL with the password goes through stdin (``slurm_user_sql``).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass

from slurmpod.providers.base import SEEDED_MARKER, NodeFile
from slurmpod.slurm import control
from slurmpod.slurm.conf import SLURMDBD_PORT

MYSQL_DATADIR = "/var/lib/mysql"
MYSQL_RUN_DIR = "/run/mysqld"
MYSQL_SOCKET = f"{MYSQL_RUN_DIR}/mysqld.sock"
MYSQL_PID_FILE = f"{MYSQL_RUN_DIR}/mysqld.pid"
MYSQL_LOG_DIR = "/var/log/mysql"
MYSQL_ERROR_LOG = f"{MYSQL_LOG_DIR}/mariadbd.err"
MYSQL_STDOUT_LOG = f"{MYSQL_LOG_DIR}/mariadbd.out"
MYSQL_PORT = 3306
#: the image's copy of a freshly initialised datadir (the node layer makes it): an empty volume is seeded from it
MARIADB_TEMPLATE = "/usr/share/slurmpod/mariadb-datadir"
#: written into the datadir once ``mariadb-install-db`` and the first start succeeded (crash-safe init)
INIT_MARKER = f"{MYSQL_DATADIR}/.slurmpod-initialized"

SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"
SLURMDBD_PID_FILE = "/run/slurmdbd.pid"
SLURMDBD_RUNTIME_PID_FILE = "/run/slurmdbd/slurmdbd.pid"  # a unit with RuntimeDirectory=slurmdbd (User=slurm)
SLURMDBD_LOG_FILE = "/var/log/slurm/slurmdbd.log"
STORAGE_USER = "slurm"
STORAGE_LOC = "slurm_acct_db"

#: slurmdbd accepts ``DbdHost=localhost`` on any host (22.05 and later), so the conf is known before the host boots
DBD_HOST = "localhost"
#: run by mariadb.service at every start (``init-file``): the slurm user, its password, its grants (0600 mysql)
INIT_SQL = "/etc/slurmpod/accounting-init.sql"
_MARIADB_UNIT = "/lib/systemd/system/mariadb.service"
SEED_UNIT = "slurmpod-seed-datadir.service"
_SLURMDBD_UNIT = "/etc/systemd/system/slurmdbd.service"
_WANTS = "/etc/systemd/system/multi-user.target.wants"

_HOST_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]*$")
_SQL_NAME_OK = re.compile(r"^[A-Za-z0-9_$]+$")
#: a table name slurmpod writes into SQL (quoted): what Slurm's lowercase cluster names (AWS's cluster names: letters,
#: digits, '-') and table suffixes hold, within MariaDB's 64 characters
_SQL_TABLE_OK = re.compile(r"^[a-z0-9_-]{1,64}$")
#: characters safe inside a single-quoted SQL string *and* as a slurmdbd.conf value (no '#', no spaces)
_PASS_OK = re.compile(r"^[A-Za-z0-9_\-.+/=@%:,^~]+$")


def accounting_instance_id(cluster_id: str) -> str:
    """The accounting host's instance id: deterministic, so a restarted server re-adopts the same host."""
    return "i-" + hashlib.sha256(f"accounting:{cluster_id}".encode()).hexdigest()[:17]


def password_problem(password: str) -> str | None:
    """Why ``password`` cannot be written into slurmdbd.conf verbatim (None when it can). Never echoes it."""
    if not password or not _PASS_OK.match(password):
        return ("the database password may only hold letters, digits and _-.+/=@%:,^~ (slurmdbd.conf cannot "
                "hold spaces, quotes or '#')")
    return None


def username_problem(user: str) -> str | None:
    """Why ``user`` cannot be slurmdbd's StorageUser (None when it can)."""
    if not _SQL_NAME_OK.match(user):
        return f"the database user name {user!r} may only hold letters, digits, '_' and '$'"
    return None


def _check_pass(password: str) -> None:
    problem = password_problem(password)
    if problem:
        raise ValueError(problem)


def render_slurmdbd_conf(
    dbd_host: str,
    storage_pass: str,
    *,
    dbd_port: int = SLURMDBD_PORT,
    storage_host: str = "localhost",
    storage_port: int = MYSQL_PORT,
    storage_user: str = STORAGE_USER,
    storage_loc: str = STORAGE_LOC,
    log_file: str = SLURMDBD_LOG_FILE,
    pid_file: str = SLURMDBD_PID_FILE,
) -> str:
    """slurmdbd.conf (install it 0600 slurm:slurm). ``dbd_host`` = the short hostname of the node that runs
    slurmdbd. ``storage_host=localhost`` makes libmariadb use the node's socket ``/run/mysqld/mysqld.sock``."""
    if not _HOST_OK.match(dbd_host) or "." in dbd_host:
        raise ValueError(f"DbdHost must be a short hostname, got {dbd_host!r}")
    if not _HOST_OK.match(storage_host):
        raise ValueError(f"invalid StorageHost {storage_host!r}")
    for kind, value in (("StorageUser", storage_user), ("StorageLoc", storage_loc)):
        if not _SQL_NAME_OK.match(value):
            raise ValueError(f"invalid {kind} {value!r}")
    _check_pass(storage_pass)
    lines = [
        "# generated by slurmpod (mode 0600, owner slurm)",
        "AuthType=auth/munge",
        f"DbdHost={dbd_host}",
        f"DbdPort={dbd_port}",
        "SlurmUser=slurm",
        "DebugLevel=info",
        f"LogFile={log_file}",
        f"PidFile={pid_file}",
        "StorageType=accounting_storage/mysql",
        f"StorageHost={storage_host}",
        f"StoragePort={storage_port}",
        f"StorageUser={storage_user}",
        f"StoragePass={storage_pass}",
        f"StorageLoc={storage_loc}",
    ]
    return "\n".join(lines) + "\n"


def install_db_argv(datadir: str = MYSQL_DATADIR) -> list[str]:
    """Initialises an empty datadir once: root authenticates over the socket, no test database."""
    return ["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=mysql",
            "--auth-root-authentication-method=socket", "--skip-test-db"]


def mariadbd_argv(datadir: str = MYSQL_DATADIR, *, buffer_pool: str = "128M") -> list[str]:
    """The server command line (it does not daemonize: start it with ``background_argv``)."""
    return ["/usr/sbin/mariadbd", "--no-defaults", "--user=mysql", f"--datadir={datadir}",
            f"--socket={MYSQL_SOCKET}", f"--pid-file={MYSQL_PID_FILE}", "--bind-address=127.0.0.1",
            f"--port={MYSQL_PORT}", "--skip-name-resolve", f"--log-error={MYSQL_ERROR_LOG}",
            f"--innodb-buffer-pool-size={buffer_pool}", "--innodb-log-file-size=64M",
            "--innodb-lock-wait-timeout=900", "--skip-ssl"]


def client_argv() -> list[str]:
    """``mariadb`` as root over the node's socket (socket authentication: no password); SQL on stdin."""
    return ["mariadb", "--no-defaults", "--protocol=socket", f"--socket={MYSQL_SOCKET}", "--user=root",
            "--skip-ssl", "--batch", "--skip-column-names"]


def slurm_user_sql(password: str, *, user: str = STORAGE_USER, database: str = STORAGE_LOC) -> bytes:
    """Idempotent SQL (feed it on stdin): the slurm user exists, has ``password`` and owns the database."""
    _check_pass(password)
    for value in (user, database):
        if not _SQL_NAME_OK.match(value):
            raise ValueError(f"invalid SQL name {value!r}")
    return (
        f"CREATE USER IF NOT EXISTS '{user}'@'localhost' IDENTIFIED BY '{password}';\n"
        f"ALTER USER '{user}'@'localhost' IDENTIFIED BY '{password}';\n"
        f"GRANT ALL ON `{database}`.* TO '{user}'@'localhost';\n"
        "FLUSH PRIVILEGES;\n"
    ).encode()


def background_argv(log_file: str, argv: list[str]) -> list[str]:
    """Runs a non-daemonizing program in the background of a node (reference node-daemon.sh): a new
    session, stdio to ``log_file``; it is re-parented to the node's PID 1 when the shell exits."""
    return ["sh", "-c", 'log=$1; shift; setsid "$@" >>"$log" 2>&1 </dev/null &', "sh", log_file, *argv]


def booted_ready_argv(conf_sha256: str, timeout: float, cluster: str | None, poll: float = 0.02) -> list[str]:
    """One in-node command for a systemd host that brought munge, MariaDB (seeded, its slurm user made by
    ``init-file``) and slurmdbd up during its boot (``boot_files``): exit 2 at once when slurmdbd.conf is not the
    expected text; else waits until munge, MariaDB and slurmdbd are active and slurmdbd accepts on its port (it
    listens only once connected to its database, so MariaDB answers too), then marks the datadir initialised
    (``INIT_MARKER``, as the step-by-step path does) and, given a ``cluster`` (slurm.conf's ClusterName), adds it
    to the database, as Slurm's accounting guide has it done before slurmctld's first start (``None``: the
    ``init-file`` made it from the image's seed cluster, ``seed_cluster_sql``): exit 0. Exit 1 after ``timeout``
    seconds or as soon as a unit failed. (One command instead of ~10, each of which costs a process tree in the
    node; the caller falls back to the step-by-step path on any non-zero exit.)"""
    failed = "systemctl is-failed --quiet mariadb slurmdbd munge && exit 1"
    late = f"[ $SECONDS -lt {int(timeout) + 1} ] || exit 1"
    add = add_cluster_script(cluster) if cluster is not None else "exit 0"
    script = (
        f'echo "{conf_sha256}  {SLURMDBD_CONF}" | sha256sum -c --status 2>/dev/null || exit 2; '
        f'until systemctl is-active --quiet munge mariadb slurmdbd && '
        f'(exec 3<>/dev/tcp/127.0.0.1/{int(SLURMDBD_PORT)}) 2>/dev/null; do {failed}; {late}; sleep {poll}; done; '
        f'touch {INIT_MARKER} || exit 1; {add}')
    return ["bash", "-c", script]


#: the slurm.conf ``sacctmgr`` reads on an accounting host (it runs no slurmctld and has no slurm.conf of its own)
SACCTMGR_CONF = "/run/slurmpod-sacctmgr.conf"


def sacctmgr_conf(cluster: str) -> str:
    """The few slurm.conf lines ``sacctmgr`` needs to reach the slurmdbd of the host it runs on."""
    return "\n".join([f"ClusterName={cluster}", "SlurmctldHost=localhost",
                       "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
                       f"AccountingStoragePort={int(SLURMDBD_PORT)}"]) + "\n"


def add_cluster_script(cluster: str) -> str:
    """Shell: ``cluster`` added to the accounting database through the local slurmdbd, so that slurmctld's first
    start registers with a cluster whose tables exist (creating them is ~0.25 s of that start otherwise). Never
    fails: a cluster already there is left alone (sacctmgr: "already exists. Not adding.", nothing changed), and
    a failure only leaves the adding to slurmctld's registration, as without this."""
    name = shlex.quote(cluster)
    conf = sacctmgr_conf(cluster).replace("\n", "\\n")
    return (f"printf '{conf}' > {SACCTMGR_CONF} && "
            f"SLURM_CONF={SACCTMGR_CONF} timeout 20 sacctmgr -i add cluster {name} >/dev/null 2>&1; exit 0")


#: the cluster an image's accounting template holds (``lifecycle.acctschema``): each accounting host's first
#: MariaDB start renames it to the cluster's own (``seed_cluster_sql``), instead of slurmdbd creating its ~20 tables
SEED_CLUSTER = "slurmpod_seed"


@dataclass(frozen=True)
class SeedCluster:
    """What the image's template holds of ``SEED_CLUSTER``: its tables' suffixes (``job_table``, ...) and whether
    ``cluster_table`` has Slurm's cluster ``id`` column (24.11 has it, 22.05 does not)."""

    tables: tuple[str, ...]
    cluster_id: bool


def seed_cluster_sql(seed: SeedCluster, cluster: str, *, database: str = STORAGE_LOC) -> bytes:
    """SQL for the ``init-file`` (after ``slurm_user_sql``): the template's seed cluster becomes ``cluster``
    (slurm.conf's ClusterName), as if slurmdbd had just added it: its tables renamed in one atomic statement; their
    definitions in ``table_defs_table`` renamed too (else slurmdbd's start compares them, finds none and ALTERs
    every table); its ``cluster_table`` and ``txn_table`` rows renamed, dated now, and (where Slurm has the column)
    a new random cluster id in 2..4095 (the ClusterID slurmctld records), so that no two clusters have the
    template's. Every start runs it: once renamed, nothing matches, so it changes nothing (a database that never
    held the seed, e.g. one kept from an older image, likewise).
    ``ValueError`` when a name cannot be written into SQL safely."""
    if not _SQL_NAME_OK.match(database):
        raise ValueError(f"invalid SQL name {database!r}")
    if not seed.tables:
        raise ValueError("the seed cluster has no tables")
    pairs = []
    for suffix in seed.tables:
        old, new = f"{SEED_CLUSTER}_{suffix}", f"{cluster}_{suffix}"
        for name in (old, new):
            if not _SQL_TABLE_OK.match(name):
                raise ValueError(f"table name {name!r} cannot be written into SQL (lowercase letters, digits, '-' "
                                 "and '_', at most 64 characters)")
        pairs.append(f"`{database}`.`{old}` TO `{database}`.`{new}`")
    db, seed_name = f"`{database}`", SEED_CLUSTER
    new_id = ", id=FLOOR(2 + RAND() * 4094)" if seed.cluster_id else ""
    return (
        f"RENAME TABLE IF EXISTS {', '.join(pairs)};\n"
        f"UPDATE {db}.table_defs_table SET table_name=REPLACE(table_name, '\"{seed_name}_', '\"{cluster}_'), "
        f"definition=REPLACE(definition, '\"{seed_name}_', '\"{cluster}_') "
        f"WHERE table_name LIKE '\"{seed_name}\\_%';\n"
        f"UPDATE {db}.txn_table SET timestamp=UNIX_TIMESTAMP(), "
        f"name=IF(name='{seed_name}', '{cluster}', name), cluster=IF(cluster='{seed_name}', '{cluster}', cluster) "
        f"WHERE name='{seed_name}' OR cluster='{seed_name}';\n"
        f"UPDATE {db}.cluster_table SET name='{cluster}', creation_time=UNIX_TIMESTAMP(), "
        f"mod_time=UNIX_TIMESTAMP(){new_id} WHERE name='{seed_name}';\n"
    ).encode()


def port_probe_argv(port: int, host: str = "127.0.0.1") -> list[str]:
    """Exit 0 iff something accepts TCP connections on ``host:port`` (bash's /dev/tcp, no extra tools)."""
    return ["timeout", "2", "bash", "-c", f"exec 3<>/dev/tcp/{host}/{int(port)}"]


def seed_datadir_script() -> str:
    """Shell (run as root before mariadbd starts): an uninitialised datadir (no ``INIT_MARKER``) becomes a sparse
    copy of the image's ``MARIADB_TEMPLATE``; an initialised one, one the provider made as that copy before the boot
    (``SEEDED_MARKER``), or an image without the template, is left alone."""
    return (f"install -d -m 0750 -o mysql -g mysql {MYSQL_DATADIR} && "
            f"{{ test -e {INIT_MARKER} || test -e {MYSQL_DATADIR}/{SEEDED_MARKER} || "
            f"! test -d {MARIADB_TEMPLATE}/mysql || "
            f"{{ find {MYSQL_DATADIR} -mindepth 1 -maxdepth 1 -exec rm -rf {{}} + && "
            f"cp -a --sparse=always {MARIADB_TEMPLATE}/. {MYSQL_DATADIR}/; }}; }}")


def _seed_unit() -> str:
    """``SEED_UNIT``: ``seed_datadir_script`` as a oneshot with no default dependencies, so it runs as the boot starts,
    alongside journald and tmpfiles, instead of on MariaDB's critical path after basic.target (the volume is
    mounted before the node's systemd starts)."""
    return ("# slurmpod: an empty accounting database volume becomes a copy of the image's template datadir\n"
            f"[Unit]\nDescription=slurmpod: seed the accounting database\nDefaultDependencies=no\n"
            f"RequiresMountsFor={MYSQL_DATADIR}\nBefore=mariadb.service\n"
            # a volume the provider seeded before the boot: not even a shell to find that out
            f"ConditionPathExists=!{MYSQL_DATADIR}/{SEEDED_MARKER}\n"
            f"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh -c '{seed_datadir_script()}'\n")


#: what an accounting host boots into (``boot_files`` makes it the default target): munge, MariaDB and slurmdbd, with
#: journald and tmpfiles as on any host, and nothing else of a node's boot (sysinit's and basic.target's units, getty,
#: sshd, container sockets): it is slurmpod's service host, which no user logs into
HOST_TARGET = "slurmpod-accounting.target"
#: munge, MariaDB and slurmdbd start as the boot starts instead of after basic.target (MariaDB ~0.26 -> ~0.1 s after
#: systemd's start on an idle host); their stop still comes before the host's shutdown
_EARLY_DROPIN = "40-slurmpod-early.conf"
_EARLY = ("# slurmpod: started with the accounting host's boot, not after basic.target\n"
          "[Unit]\nDefaultDependencies=no\nConflicts=shutdown.target\nBefore=shutdown.target\n")
#: MariaDB's runtime directories (Debian makes them with tmpfiles, which no longer runs first): /run/mysqld, and
#: /run/mariadbd of MariaDB >= 11.8; kept when it stops (tmpfiles' socket link of sid's images lives there)
_MARIADB_EARLY = "[Service]\nRuntimeDirectory=mysqld mariadbd\nRuntimeDirectoryPreserve=yes\n"


def _host_target(local_db: bool) -> str:
    units = ["systemd-journald.socket", "systemd-journald.service", "systemd-tmpfiles-setup.service",
             "munge.service", *(["mariadb.service"] if local_db else []), "slurmdbd.service"]
    return ("# slurmpod: the accounting host's default target\n"
            f"[Unit]\nDescription=slurmpod accounting host\nWants={' '.join(units)}\nAllowIsolate=yes\n")


def boot_files(munge_key: bytes, dbd_conf: str, *, password: str | None, seed_sql: bytes = b"") -> list[NodeFile]:
    """A systemd accounting host's files before its first boot, so munge, MariaDB (seeded from the image's
    template, the slurm user made by ``init-file``, then ``seed_sql``: ``seed_cluster_sql``) and slurmdbd start with
    the boot itself (``HOST_TARGET``). ``password=None``: slurmdbd stores into an external database (no local
    MariaDB). (MariaDB stops running an init-file at its first failing statement: the user comes first.)"""
    units = "/etc/systemd/system"
    files = [control.munge_key_file(munge_key),
             NodeFile(SLURMDBD_CONF, dbd_conf.encode(), 0o600, "slurm"),
             NodeFile(f"{_WANTS}/slurmdbd.service", link=_SLURMDBD_UNIT),
             *(NodeFile(f"{units}/{unit}.service.d/{_EARLY_DROPIN}", _EARLY.encode(), 0o644)
               for unit in ("munge", "slurmdbd")),
             NodeFile(f"{units}/{HOST_TARGET}", _host_target(password is not None).encode(), 0o644),
             NodeFile(f"{units}/default.target", link=f"{units}/{HOST_TARGET}")]
    if password is not None:
        files += [
            NodeFile(f"{units}/{SEED_UNIT}", _seed_unit().encode(), 0o644),
            NodeFile(f"{units}/mariadb.service.d/50-slurmpod-accounting.conf",
                     ("# slurmpod: the accounting host's datadir is seeded from the image before the first start\n"
                      "# (a unit of its own, run at the very start of the boot); mariadbd started directly:\n"
                      "# Debian's ExecStart first asks galera_recovery for a Galera position, and there is none\n"
                      f"[Unit]\nRequires={SEED_UNIT}\nAfter={SEED_UNIT}\n"
                      "[Service]\nExecStart=\nExecStart=/usr/sbin/mariadbd\n").encode(), 0o644),
            NodeFile(f"{units}/mariadb.service.d/{_EARLY_DROPIN}", (_EARLY + _MARIADB_EARLY).encode(), 0o644),
            NodeFile("/etc/mysql/mariadb.conf.d/70-slurmpod-accounting.cnf",
                     f"# slurmpod: the slurm user of slurmdbd\n[mysqld]\ninit-file={INIT_SQL}\n".encode(), 0o644),
            NodeFile(INIT_SQL, slurm_user_sql(password) + seed_sql, 0o600, "mysql"),
            NodeFile(f"{_WANTS}/mariadb.service", link=_MARIADB_UNIT),
        ]
    return files
