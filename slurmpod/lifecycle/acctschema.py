"""slurmdbd's schema, made once per image: the accounting database template starts with Slurm's tables.

An accounting host's empty database volume is seeded from the image's ``MARIADB_TEMPLATE`` (the node layer copies
Debian's initialised datadir there). Without more, every cluster's first slurmdbd start then creates Slurm's ~20
global tables (0.2-0.35 s of the accounting host's critical path, issue 21). On Debian 13 it is worse: 24.11's
slurmdbd, on the start that creates its database on MariaDB 11.8, dies in its next query ("Number of columns in
result (=1) set exceeds maximum allowed number of columns (=0)"), and only systemd's restart 2 s later works.

``prepare_schema`` does that once, at image build (or import) time: MariaDB on the template and the image's own
slurmdbd (a second start when the first dies as above), in a throwaway namespace set (mount: ``/proc``, ``/dev``,
and tmpfs ``/run`` and ``/tmp`` over the tree; network: a loopback of its own, so no port of the host is taken;
PID: when the script ends, or ``unshare`` is killed on a timeout, the kernel ends every daemon it started), until
slurmdbd says it started; then slurmdbd stops, the temporary ``slurm`` database user is dropped (each accounting
host's ``init-file`` creates it with the cluster's own password) and MariaDB shuts down cleanly. Nothing outside
the template is written: the daemons' sockets, logs, munge key and configuration live in the tmpfs ``/run``.

The database itself is created before slurmdbd starts: when slurmdbd has to create it, its first connection fails
("TLS/SSL error: SSL is required, but the server does not support it", libmariadb >= 3.4 on a server without TLS)
and the MySQL plugin retries only 5 s later. With that and the throwaway network's second address (``_OUTER``) the
preparation measured 15.4 s -> 1.5 s on trixie (the build's whole node layer 15.8 s -> 2 s).

The per-cluster tables (``<cluster>_job_table``, ...) need the cluster's name, which an image does not know: the
preparation adds a cluster named ``acct.SEED_CLUSTER`` (``sacctmgr add cluster``, through the running slurmdbd) and
records its tables in ``SEED_FILE``; each accounting host's first MariaDB start renames them to its cluster's
(``acct.seed_cluster_sql`` in its ``init-file``), which is how the cluster is in the database before slurmctld first
registers, without the ~0.25 s ``sacctmgr add cluster`` of the host's boot.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
from pathlib import Path

from slurmpod.lifecycle.rootfs import RootfsError
from slurmpod.slurm import accounting as acct

#: the whole preparation (MariaDB's start, slurmdbd's tables, both stops) is ~1.5 s, more on a busy machine
PREPARE_TIMEOUT = 300.0
#: a mark in the template: the schema is there (``prepare_schema`` is idempotent on a tree that has it)
SCHEMA_MARK = ".slurmpod-schema"
#: the template's record of its seed cluster (``acct.SEED_CLUSTER``): its tables, and whether it has a cluster id
SEED_FILE = ".slurmpod-seed-cluster.json"
#: where Debian sid's MariaDB 11.8 (server and libmariadb) keeps its socket
MARIADBD_RUN_DIR = "/run/mariadbd"

# outside the chroot, in the new namespaces: the mounts the daemons need, then the image's bash on stdin's script
_OUTER = """set -eu
root=$1
ip link set lo up
# an address besides loopback: slurmdbd resolves its listening address with AI_ADDRCONFIG, which ignores loopback;
# without one it retries for 10 s before it can listen (and then dies), even after SIGTERM
ip link add prep0 type veth peer name prep1
ip addr add 192.0.2.1/32 dev prep0
ip link set prep1 up
ip link set prep0 up
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -s
"""

#: the preparation's own files: tmpfs, gone with the namespace
_DBD_DIR, _MUNGE_DIR = "/run/prep-dbd", "/run/prep-munge"


def _inner_script(password: str) -> str:
    """The script the image's bash runs (on stdin, so the throwaway password is in no argv): munged with a
    throwaway key, MariaDB on the template, the slurm user (``slurm_user_sql``), slurmdbd with a conf of its own
    (``render_slurmdbd_conf``), then everything stopped and the user dropped."""
    sql = shlex.join(acct.client_argv())
    conf = acct.render_slurmdbd_conf(acct.DBD_HOST, password, log_file=f"{_DBD_DIR}/slurmdbd.log",
                                     pid_file=f"{_DBD_DIR}/slurmdbd.pid")
    return f"""set -eu
T={acct.MARIADB_TEMPLATE}
SOCK={acct.MYSQL_SOCKET}
install -d -o mysql -g mysql {acct.MYSQL_RUN_DIR} {MARIADBD_RUN_DIR}
# MariaDB 11.8 of Debian sid: libmariadb (slurmdbd's) looks for the socket in /run/mariadbd
ln -s $SOCK {MARIADBD_RUN_DIR}/mysqld.sock
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 {_MUNGE_DIR}
install -d -o slurm -g slurm -m 0700 {_DBD_DIR}
head -c 1024 /dev/urandom > {_MUNGE_DIR}/key
chown munge:munge {_MUNGE_DIR}/key
chmod 0400 {_MUNGE_DIR}/key
runuser -u munge -- /usr/sbin/munged --key-file={_MUNGE_DIR}/key --seed-file={_MUNGE_DIR}/seed \\
  --log-file={_MUNGE_DIR}/log --pid-file={_MUNGE_DIR}/pid --socket=/run/munge/munge.socket.2
/usr/sbin/mariadbd --user=mysql --datadir=$T --socket=$SOCK --pid-file={acct.MYSQL_RUN_DIR}/prep.pid \\
  --skip-networking --log-error={acct.MYSQL_RUN_DIR}/error.log --innodb-buffer-pool-size=32M &
db=$!
until echo "SELECT 1;" | {sql} >/dev/null 2>&1; do
  kill -0 $db 2>/dev/null || {{ echo "mariadbd exited:"; tail -n 15 {acct.MYSQL_RUN_DIR}/error.log; exit 1; }}
  sleep 0.05
done
{sql} <<'SQL'
{acct.slurm_user_sql(password).decode()}CREATE DATABASE IF NOT EXISTS `{acct.STORAGE_LOC}`;
SQL
cat > {_DBD_DIR}/slurmdbd.conf <<'CONF'
{conf}CONF
chown slurm:slurm {_DBD_DIR}/slurmdbd.conf
chmod 0600 {_DBD_DIR}/slurmdbd.conf
for attempt in 1 2; do
  SLURM_CONF={_DBD_DIR}/slurm.conf /usr/sbin/slurmdbd -D >{_DBD_DIR}/stdout 2>&1 &
  dbd=$!
  until grep -q "slurmdbd version .* started" {_DBD_DIR}/slurmdbd.log 2>/dev/null; do
    kill -0 $dbd 2>/dev/null || break
    sleep 0.05
  done
  kill -0 $dbd 2>/dev/null && break
  # 24.11 with MariaDB 11.8: the start that creates the database dies in its next query; the second one works
  [ $attempt = 1 ] || {{ echo "slurmdbd exited:"; tail -n 15 {_DBD_DIR}/slurmdbd.log; exit 1; }}
done
# the seed cluster: its tables are made now, and each accounting host's MariaDB renames them to its cluster's
cat > {_DBD_DIR}/slurm.conf <<'CONF'
{acct.sacctmgr_conf(acct.SEED_CLUSTER)}CONF
SLURM_CONF={_DBD_DIR}/slurm.conf timeout 60 sacctmgr -i add cluster {acct.SEED_CLUSTER} >{_DBD_DIR}/sacctmgr.out 2>&1 ||
  {{ echo "sacctmgr add cluster {acct.SEED_CLUSTER} failed:"; tail -n 5 {_DBD_DIR}/sacctmgr.out; exit 1; }}
kill -TERM $dbd
wait $dbd || true
{sql} > $T/{SEED_FILE} <<'SQL'
{_seed_record_sql()}SQL
echo "DROP USER '{acct.STORAGE_USER}'@'localhost';" | {sql}
tables=$(echo "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='{acct.STORAGE_LOC}';" | {sql})
mariadb-admin --no-defaults --socket=$SOCK --user=root --skip-ssl shutdown
wait $db || true
[ "$tables" -gt 0 ] || {{ echo "slurmdbd created no tables"; exit 1; }}
echo "$tables" > $T/{SCHEMA_MARK}
echo "tables=$tables"
"""


def _seed_record_sql() -> str:
    """SQL run once slurmdbd stopped: the seed cluster's dated rows go (its ``last_ran`` and ``event`` rows: a cluster
    renamed from it has been registered by nobody yet, as one that slurmctld's registration adds), and a line of
    JSON names its tables (``seed_cluster``)."""
    db, seed = acct.STORAGE_LOC, acct.SEED_CLUSTER
    tables = (f"FROM information_schema.tables WHERE table_schema='{db}' AND table_name LIKE '{seed}\\_%'")
    has_id = (f"SELECT COUNT(*) > 0 FROM information_schema.columns WHERE table_schema='{db}' "
              "AND table_name='cluster_table' AND column_name='id'")
    return (f"DELETE FROM `{db}`.`{seed}_last_ran_table`;\n"
            f"DELETE FROM `{db}`.`{seed}_event_table`;\n"
            f"SELECT JSON_OBJECT('tables', JSON_ARRAYAGG(SUBSTRING(table_name, {len(seed) + 2})), "
            f"'cluster_id', ({has_id})) {tables};\n")


def seed_cluster(root: Path) -> acct.SeedCluster | None:
    """The seed cluster of the image at ``root`` (``SEED_FILE``); None when its template has none (an image made
    before slurmpod seeded one, or without accounting) or the record is unreadable."""
    path = root / acct.MARIADB_TEMPLATE.lstrip("/") / SEED_FILE
    try:
        record = json.loads(path.read_text())
        tables = tuple(str(t) for t in record["tables"])
        return acct.SeedCluster(tables=tables, cluster_id=bool(record["cluster_id"])) if tables else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prepare_schema(root: Path, *, timeout: float = PREPARE_TIMEOUT) -> int:
    """Creates slurmdbd's tables in the tree's MariaDB template (see the module doc); the number of tables, 0 when
    the image has no template or no slurmdbd (nothing done). Raises ``RootfsError`` naming what failed."""
    template = root / acct.MARIADB_TEMPLATE.lstrip("/")
    if not (template / "mysql").is_dir() or not (root / "usr/sbin/slurmdbd").exists():
        return 0
    mark = template / SCHEMA_MARK
    if mark.exists():
        return int(mark.read_text().strip() or 0)
    argv = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--propagation", "private", "--",
            "bash", "-c", _OUTER, "prepare-schema", str(root)]
    try:
        done = subprocess.run(argv, input=_inner_script(secrets.token_hex(16)), capture_output=True, text=True,  # noqa: S603
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RootfsError(f"preparing slurmdbd's schema in the image took over {timeout:.0f} s") from exc
    if done.returncode != 0 or not mark.exists():
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise RootfsError(f"preparing slurmdbd's schema in the image failed (exit {done.returncode}): {tail}")
    return int(mark.read_text().strip())
