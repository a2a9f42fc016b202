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

The per-cluster tables (``<cluster>_job_table``, ...) are created when the cluster's slurmctld first registers:
they need the cluster's name, which an image does not know.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from slurmpod.lifecycle.rootfs import RootfsError
from slurmpod.slurm.accounting import MARIADB_TEMPLATE, STORAGE_LOC, STORAGE_USER

#: the whole preparation (MariaDB's start, slurmdbd's tables, both stops) on a busy 2-core machine is ~3-10 s
PREPARE_TIMEOUT = 300.0
#: a mark in the template: the schema is there (``prepare_schema`` is idempotent on a tree that has it)
SCHEMA_MARK = ".slurmpod-schema"

# outside the chroot, in the new namespaces: the mounts the daemons need, then the image's bash on stdin's script
_OUTER = """set -eu
root=$1
ip link set lo up
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -s
"""

_INNER = f"""set -eu
T={MARIADB_TEMPLATE}
SOCK=/run/mysqld/mysqld.sock
sql() {{ mariadb --no-defaults --protocol=socket --socket=$SOCK --user=root --batch; }}
install -d -o mysql -g mysql /run/mysqld /run/mariadbd
# MariaDB 11.8 of Debian sid: libmariadb (slurmdbd's) looks for the socket in /run/mariadbd
ln -s $SOCK /run/mariadbd/mysqld.sock
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /run/prep-munge
install -d -o slurm -g slurm -m 0700 /run/prep-dbd
head -c 1024 /dev/urandom > /run/prep-munge/key
chown munge:munge /run/prep-munge/key
chmod 0400 /run/prep-munge/key
runuser -u munge -- /usr/sbin/munged --key-file=/run/prep-munge/key --seed-file=/run/prep-munge/seed \\
  --log-file=/run/prep-munge/log --pid-file=/run/prep-munge/pid --socket=/run/munge/munge.socket.2
/usr/sbin/mariadbd --user=mysql --datadir=$T --socket=$SOCK --pid-file=/run/mysqld/prep.pid \\
  --skip-networking --log-error=/run/mysqld/error.log --innodb-buffer-pool-size=32M &
db=$!
until echo "SELECT 1;" | sql >/dev/null 2>&1; do
  kill -0 $db 2>/dev/null || {{ echo "mariadbd exited:"; tail -n 15 /run/mysqld/error.log; exit 1; }}
  sleep 0.05
done
pass=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')
printf "%s\\n" "CREATE OR REPLACE USER '{STORAGE_USER}'@'localhost' IDENTIFIED BY '$pass';" \\
  "GRANT ALL ON \\`{STORAGE_LOC}\\`.* TO '{STORAGE_USER}'@'localhost';" | sql
cat > /run/prep-dbd/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
DebugLevel=info
LogFile=/run/prep-dbd/slurmdbd.log
PidFile=/run/prep-dbd/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser={STORAGE_USER}
StoragePass=$pass
StorageLoc={STORAGE_LOC}
CONF
chown slurm:slurm /run/prep-dbd/slurmdbd.conf
chmod 0600 /run/prep-dbd/slurmdbd.conf
for attempt in 1 2; do
  SLURM_CONF=/run/prep-dbd/slurm.conf /usr/sbin/slurmdbd -D >/run/prep-dbd/stdout 2>&1 &
  dbd=$!
  until grep -q "slurmdbd version .* started" /run/prep-dbd/slurmdbd.log 2>/dev/null; do
    kill -0 $dbd 2>/dev/null || break
    sleep 0.05
  done
  kill -0 $dbd 2>/dev/null && break
  # 24.11 with MariaDB 11.8: the start that creates the database dies in its next query; the second one works
  [ $attempt = 1 ] || {{ echo "slurmdbd exited:"; tail -n 15 /run/prep-dbd/slurmdbd.log; exit 1; }}
done
kill -TERM $dbd
wait $dbd || true
echo "DROP USER '{STORAGE_USER}'@'localhost';" | sql
tables=$(echo "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='{STORAGE_LOC}';" | sql | tail -n 1)
mariadb-admin --no-defaults --socket=$SOCK --user=root shutdown
wait $db || true
[ "$tables" -gt 0 ] || {{ echo "slurmdbd created no tables"; exit 1; }}
echo "$tables" > $T/{SCHEMA_MARK}
echo "tables=$tables"
"""


def prepare_schema(root: Path, *, timeout: float = PREPARE_TIMEOUT) -> int:
    """Creates slurmdbd's tables in the tree's MariaDB template (see the module doc); the number of tables, 0 when
    the image has no template or no slurmdbd (nothing done). Raises ``RootfsError`` naming what failed."""
    template = root / MARIADB_TEMPLATE.lstrip("/")
    if not (template / "mysql").is_dir() or not (root / "usr/sbin/slurmdbd").exists():
        return 0
    mark = template / SCHEMA_MARK
    if mark.exists():
        return int(mark.read_text().strip() or 0)
    argv = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--propagation", "private", "--",
            "bash", "-c", _OUTER, "prepare-schema", str(root)]
    try:
        done = subprocess.run(argv, input=_INNER, capture_output=True, text=True,  # noqa: S603
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RootfsError(f"preparing slurmdbd's schema in the image took over {timeout:.0f} s") from exc
    if done.returncode != 0 or not mark.exists():
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise RootfsError(f"preparing slurmdbd's schema in the image failed (exit {done.returncode}): {tail}")
    return int(mark.read_text().strip())
