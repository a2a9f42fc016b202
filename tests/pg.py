"""A throwaway PostgreSQL server for tests, built from Debian's ``postgresql-NN`` packages.

``postgres_server()`` runs ``initdb`` into a fresh temp directory, starts the server with ``pg_ctl`` listening
only on 127.0.0.1 (plus a unix socket inside that directory) with trust authentication, and on exit stops it
and removes the directory, also when the body raised. As root the binaries run as the ``postgres`` system user
(``setpriv``); as any other user they run as that user. ``PgServer.create_database``/``drop_database`` give
tests a fresh database each; ``PgServer.url(db)`` is the SQLAlchemy URL.

Environment knobs: ``SLURMPOD_PG_BINDIR`` (a directory holding ``initdb``/``pg_ctl``; default: the newest
``/usr/lib/postgresql/*/bin``), ``SLURMPOD_PG_TMPDIR`` (parent of the data dir; default ``/tmp``, which the
``postgres`` user can traverse, unlike pytest's 0700 ``tmp_path``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_TIMEOUT = 60.0
_SAFE_DBNAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """No usable PostgreSQL binaries (or no way to run them) on this machine."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: ``$SLURMPOD_PG_BINDIR`` or the newest Debian install."""
    override = os.environ.get("SLURMPOD_PG_BINDIR")
    candidates = [Path(override)] if override else []

    def version_key(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version_key, reverse=True)
    for d in candidates:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_pg_user(argv: list[str]) -> list[str]:
    """Prefixes ``argv`` so it runs as the ``postgres`` user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={SUPERUSER}", f"--regid={SUPERUSER}", "--init-groups", "--", *argv]
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", SUPERUSER, "--", *argv]
    raise PostgresUnavailable("running as root but neither setpriv nor runuser is available")


def _run(argv: list[str], *, timeout: float = _TIMEOUT, log: Path | None = None) -> None:
    """Runs a PostgreSQL tool; output goes to ``log`` (never a pipe: pg_ctl's server would inherit it)."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "LANG": "C"}
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(log, "ab")) if log else subprocess.DEVNULL
        res = subprocess.run(
            _as_pg_user(argv), stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            env=env, timeout=timeout, check=False, cwd="/",
        )
    if res.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
        raise RuntimeError(f"{Path(argv[0]).name} failed with exit code {res.returncode}:\n{tail}")


@dataclass
class PgServer:
    """A running throwaway server; ``url(db)`` gives the SQLAlchemy URL of one of its databases."""

    bindir: Path
    root: Path
    port: int
    host: str = "127.0.0.1"
    default_db: str = "slurmpod_test"

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    def url(self, db: str | None = None) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{db or self.default_db}"

    def _admin_sql(self, sql: str) -> None:
        import psycopg

        dsn = f"host={self.host} port={self.port} user={SUPERUSER} dbname=postgres connect_timeout=10"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]  # identifiers checked by _check_name

    def create_database(self, name: str) -> str:
        """Creates database ``name`` (lowercase identifier) and returns its URL."""
        self._admin_sql(f'CREATE DATABASE "{_check_name(name)}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drops ``name``, terminating leftover connections (PostgreSQL 13+)."""
        self._admin_sql(f'DROP DATABASE IF EXISTS "{_check_name(name)}" WITH (FORCE)')


def _check_name(name: str) -> str:
    if not _SAFE_DBNAME.match(name):
        raise ValueError(f"unsafe database name {name!r}")
    return name


def _write_conf(server: PgServer) -> None:
    extra = "\n".join(
        [
            "",
            "# slurmpod test harness",
            f"listen_addresses = '{server.host}'",
            f"port = {server.port}",
            f"unix_socket_directories = '{server.socket_dir}'",
            "max_connections = 100",
            "fsync = off",
            "synchronous_commit = off",
            "full_page_writes = off",
            "logging_collector = off",
            "",
        ]
    )
    with open(server.datadir / "postgresql.conf", "a", encoding="utf-8") as fh:
        fh.write(extra)


def _postmaster_pid(datadir: Path) -> int | None:
    try:
        first = (datadir / "postmaster.pid").read_text().splitlines()[0]
        return int(first.strip())
    except (OSError, IndexError, ValueError):
        return None


def _stop(server: PgServer) -> None:
    """Stops the server we started: pg_ctl fast shutdown, then SIGKILL of its own postmaster PID."""
    if not (server.datadir / "postmaster.pid").exists():
        return
    with contextlib.suppress(Exception):
        _run([str(server.bindir / "pg_ctl"), "-D", str(server.datadir), "-m", "fast", "-w", "-t", "30", "stop"],
             timeout=45, log=server.log_file)
        return
    pid = _postmaster_pid(server.datadir)
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)


def _wait_accepting(server: PgServer, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            dsn = f"host={server.host} port={server.port} user={SUPERUSER} dbname=postgres connect_timeout=5"
            with psycopg.connect(dsn) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _preflight() -> tuple[Path, pwd.struct_passwd | None]:
    """The bindir and (as root) the ``postgres`` user to run it as; ``PostgresUnavailable`` otherwise."""
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable("no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin; "
                                  "install postgresql (apt-get install postgresql) or set SLURMPOD_PG_BINDIR")
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise PostgresUnavailable("psycopg is not installed (pip install 'psycopg[binary]')") from exc
    if os.geteuid() != 0:
        return bindir, None
    try:
        owner = pwd.getpwnam(SUPERUSER)
    except KeyError as exc:
        raise PostgresUnavailable(f"running as root but there is no {SUPERUSER!r} system user") from exc
    if not (shutil.which("setpriv") or shutil.which("runuser")):
        raise PostgresUnavailable("running as root but neither setpriv nor runuser is available")
    return bindir, owner


def unavailable_reason() -> str | None:
    """Why ``postgres_server()`` cannot work here, or None when it can (use it to skip tests)."""
    try:
        _preflight()
    except PostgresUnavailable as exc:
        return str(exc)
    return None


@contextlib.contextmanager
def postgres_server(default_db: str = "slurmpod_test") -> Iterator[PgServer]:
    """Starts a private PostgreSQL server with database ``default_db``; stops it and deletes its files on exit.

    Raises ``PostgresUnavailable`` when no binaries (or psycopg, or the ``postgres`` user) are present.
    """
    bindir, owner = _preflight()
    parent = os.environ.get("SLURMPOD_PG_TMPDIR", "/tmp")
    root = Path(tempfile.mkdtemp(prefix="slurmpod-pg-", dir=parent))
    server = PgServer(bindir=bindir, root=root, port=0, default_db=default_db)
    try:
        server.socket_dir.mkdir()
        if owner is not None:
            for p in (root, server.socket_dir):
                os.chown(p, owner.pw_uid, owner.pw_gid)
        _run([str(bindir / "initdb"), "-D", str(server.datadir), "-U", SUPERUSER, "--auth=trust",
              "--encoding=UTF8", "--locale=C", "--no-sync"], timeout=120, log=root / "initdb.log")
        last_error: Exception | None = None
        for _attempt in range(3):  # the free port may be taken between probe and bind: retry on another
            server.port = free_port()
            _write_conf(server)
            try:
                _run([str(bindir / "pg_ctl"), "-D", str(server.datadir), "-l", str(server.log_file),
                      "-w", "-t", "60", "start"], timeout=90, log=root / "pg_ctl.log")
                _wait_accepting(server)
                last_error = None
                break
            except Exception as exc:  # noqa: BLE001 - retried, then re-raised
                last_error = exc
                _stop(server)
        if last_error is not None:
            raise last_error
        server.create_database(default_db)
        yield server
    finally:
        try:
            _stop(server)
        finally:
            shutil.rmtree(root, ignore_errors=True)
