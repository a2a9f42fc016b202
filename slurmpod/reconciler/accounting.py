"""``AccountingService``: slurmdbd + MariaDB of a cluster on its own service host.

The accounting host is a cluster-level instance, not a controller, so accounting outlives a controller
failure: its own namespace and address (provider group ``accounting``), its database on the per-cluster
volume ``accounting-db`` (mounted at ``/var/lib/mysql``; it outlives the instance and is removed with the
cluster). Its instance id is derived from the cluster id, so ``ensure`` is idempotent and a restarted
server re-adopts the same host; every step checks before it acts (crash-safe):

1. launch (or find) the instance; start munged with the cluster key
2. initialise the datadir once (``mariadb-install-db``; a marker file records success, a half-done init is
   wiped and redone), start mariadbd in the background, apply the idempotent ``slurm`` user SQL (stdin)
3. write ``/etc/slurm/slurmdbd.conf`` (0600 slurm) and start slurmdbd; wait until it accepts on 6819

The database password is generated once and kept in ``<state>/clusters/<id>/accounting-db.pass`` (0600).
It never appears on a command line or in a log line or error message.

With an external database (``Orchestrator.Slurm.AccountingDatabase``) the host runs slurmdbd only, pointed at
that database (``ExternalDatabase``: endpoint, port, schema, user and password from the secret store); a
MariaDB this host ran before (the cluster attached the database later) is stopped, its volume kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmpod.domain.slurm_release import major_of
from slurmpod.files import secret_file, write_atomic
from slurmpod.lifecycle import acctschema
from slurmpod.lifecycle.images import BUILTIN, Image
from slurmpod.providers.base import (
    CommandResult,
    CommandRunner,
    InstanceRequest,
    NodeFile,
    Provider,
    ProviderError,
    ProviderInstance,
    SeedWarming,
    VolumeMount,
)
from slurmpod.providers.nodefiles import write_files
from slurmpod.slurm import accounting as acct
from slurmpod.slurm import control, units
from slurmpod.slurm.conf import SLURMDBD_PORT, AccountingConfig, slurm_cluster_name

log = logging.getLogger("slurmpod.accounting")

ACCOUNTING_GROUP = "accounting"
ACCOUNTING_INSTANCE_TYPE = "ml.t3.medium"
DB_VOLUME = VolumeMount("accounting-db", acct.MYSQL_DATADIR)
PASSWORD_FILE = "accounting-db.pass"
IMAGE_FILE = "accounting-image.json"  # the image the accounting host was launched with
READY_TIMEOUT = 90.0
BOOTED_WAIT = 30.0  # a host booted with its daemons' files: its one in-node wait gives up after this (see _ensure)
POLL = 0.1


@dataclass(frozen=True)
class ExternalDatabase:
    """An existing MariaDB/MySQL for slurmdbd (resolved from AccountingDatabase + its secret)."""

    host: str
    port: int
    name: str
    user: str
    password: str

    def __repr__(self) -> str:  # the password never reaches a log line or traceback
        return f"ExternalDatabase({self.user}@{self.host}:{self.port}/{self.name})"

    def fingerprint(self) -> str:
        return hashlib.sha256(repr((self.host, self.port, self.name, self.user, self.password)).encode()).hexdigest()


def _fingerprint(external: ExternalDatabase | None) -> str:
    return external.fingerprint() if external is not None else "internal"


class AccountingError(control.SlurmError):
    """The accounting host could not be brought up (message and log tail hold no secret)."""


class AccountingService:
    """Runs one accounting host per cluster through ``provider``; see the module docstring."""

    def __init__(self, provider: Provider, state_dir: Path, *, image: Image = BUILTIN,
                 instance_type: str = ACCOUNTING_INSTANCE_TYPE, ready_timeout: float = READY_TIMEOUT) -> None:
        self.provider = provider
        self.dir = Path(state_dir) / "clusters"
        self.image = image
        self.instance_type = instance_type
        self.ready_timeout = ready_timeout
        self.last_ensure_seconds = 0.0  # duration of the most recent ensure() (diagnostics, benchmarks)
        self._configs: dict[str, AccountingConfig] = {}
        self._modes: dict[str, str] = {}  # cluster id -> fingerprint of the database its slurmdbd uses
        self._locks: dict[str, threading.Lock] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._addresses: dict[str, str] = {}  # cluster id -> the accounting host's address (known once launched)
        self._images: dict[str, Image | None] = {}  # cluster id -> the recorded image (IMAGE_FILE), cached
        self._guard = threading.Lock()
        self._launched = threading.Condition(self._guard)

    def _recorded(self, cluster_id: str) -> Image | None:
        """The image the cluster's accounting host was launched with (read from its state file once per process)."""
        with self._guard:
            if cluster_id in self._images:
                return self._images[cluster_id]
        try:
            image: Image | None = Image.from_dict(json.loads((self.dir / cluster_id / IMAGE_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            image = None
        with self._guard:
            self._images[cluster_id] = image
        return image

    def image_of(self, cluster_id: str) -> Image:
        """The image the cluster's accounting host runs (recorded when it was launched), else the service's."""
        return self._recorded(cluster_id) or self.image

    def systemd(self, cluster_id: str) -> bool:
        """The host boots an image root filesystem with systemd (its daemons are units), not the host's /."""
        return _systemd(self.image_of(cluster_id))

    def _target(self, cluster_id: str, image: Image | None) -> Image:
        """The image the host should run: ``image`` when there is no host yet or it carries a later Slurm release
        (slurmdbd is upgraded first, before any slurmctld); otherwise the one it runs (never a downgrade, no
        replacement for a patch release: slurmdbd may be newer than slurmctld)."""
        current = self._recorded(cluster_id)
        if image is None or current is None:
            return image or current or self.image
        new, old = major_of(image.slurm_version), major_of(current.slurm_version)
        return image if new is not None and old is not None and new > old else current

    def _record_image(self, cluster_id: str, image: Image) -> None:
        d = self.dir / cluster_id
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(d / IMAGE_FILE, (json.dumps(asdict(image), indent=1) + "\n").encode())
        with self._guard:
            self._images[cluster_id] = image

    # ---- public API ---------------------------------------------------------------------------

    @staticmethod
    def instance_id(cluster_id: str) -> str:
        return acct.accounting_instance_id(cluster_id)

    def cached(self, cluster_id: str, external: ExternalDatabase | None = None) -> AccountingConfig | None:
        """The config the last successful ``ensure`` for this database returned in this process (None after a
        restart or when the cluster's database changed since)."""
        if self._modes.get(cluster_id) != _fingerprint(external):
            return None
        return self._configs.get(cluster_id)

    def begin(self, cluster_id: str, cluster_name: str, munge_key: bytes,
              external: ExternalDatabase | None = None, image: Image | None = None) -> None:
        """Starts ``ensure`` in a background thread (e.g. while the controller boots); returns at once.

        A later ``ensure`` waits for it and returns its result, or redoes (and reports) what failed."""
        with self._guard:
            running = self._threads.get(cluster_id)
            if cluster_id in self._configs or (running is not None and running.is_alive()):
                return
            t = threading.Thread(target=self._ensure_quietly,
                                 args=(cluster_id, cluster_name, munge_key, external, image),
                                 name=f"accounting-{cluster_id}", daemon=True)
            self._threads[cluster_id] = t
            t.start()

    def address(self, cluster_id: str, cluster_name: str, munge_key: bytes,
                external: ExternalDatabase | None = None, image: Image | None = None) -> AccountingConfig:
        """Where slurmctld will find slurmdbd, as soon as the accounting host has its address (for a slurm.conf
        written before slurmctld starts: its first start still needs slurmdbd up, see ``ensure``). Starts ``begin``
        if needed; when that fails before the host has an address, ``ensure``'s error is raised."""
        cfg = self.cached(cluster_id, external)
        if cfg is not None:
            return cfg
        self.begin(cluster_id, cluster_name, munge_key, external, image)
        deadline = time.monotonic() + self.ready_timeout
        with self._launched:
            while cluster_id not in self._addresses:
                running = self._threads.get(cluster_id)
                if running is None or not running.is_alive() or time.monotonic() >= deadline:
                    break
                self._launched.wait(0.2)
            ip = self._addresses.get(cluster_id)
        if ip is None:
            return self.ensure(cluster_id, cluster_name, munge_key, external, image)
        return AccountingConfig(host_ip=ip, port=SLURMDBD_PORT)

    def ensure(self, cluster_id: str, cluster_name: str, munge_key: bytes,
               external: ExternalDatabase | None = None, image: Image | None = None) -> AccountingConfig:
        """Brings the accounting host up (idempotent) and returns where slurmctld finds slurmdbd.

        ``external``: slurmdbd stores into that database instead of the host's own MariaDB. ``image``: the image of
        the cluster's controllers; a host on an earlier Slurm release gets its root volume replaced by it (its
        database volume stays; the new slurmdbd converts the database at its first start).
        Raises ``AccountingError`` (a ``SlurmError``) or ``ProviderError``."""
        with self._lock(cluster_id):
            cfg = self._configs.get(cluster_id)
            mode = _fingerprint(external)
            target = self._target(cluster_id, image)
            same_image = target.image_id == self.image_of(cluster_id).image_id
            if cfg is not None and self._modes.get(cluster_id) == mode and same_image and self.alive(cluster_id):
                return cfg
            t0 = time.monotonic()
            cfg = self._ensure(cluster_id, cluster_name, munge_key, external, target)
            self.last_ensure_seconds = time.monotonic() - t0
            self._configs[cluster_id] = cfg
            self._modes[cluster_id] = mode
            log.info("cluster %s: accounting host %s ready at %s:%d in %.1fs", cluster_name,
                     self.instance_id(cluster_id), cfg.host_ip, cfg.port, self.last_ensure_seconds)
            return cfg

    def warm(self, image: Image | None = None) -> None:
        """A provider that makes seeded volumes ahead (``SeedWarming``) prepares ``image``'s (default: the server's
        default image's) template datadir, so the next accounting host's launch renames a copy instead of making
        one: at server start, and once an accounting host is up (not while it boots: the copy's writes would slow
        its MariaDB's start)."""
        image = image or self.image
        if isinstance(self.provider, SeedWarming) and self._template_boot(image):
            self.provider.warm_seed(image.root, acct.MARIADB_TEMPLATE)

    def alive(self, cluster_id: str) -> bool:
        """The accounting instance runs and so does its slurmdbd."""
        iid = self.instance_id(cluster_id)
        try:
            inst = next((i for i in self.provider.list_instances(cluster_id) if i.instance_id == iid), None)
            if inst is None or not inst.alive:
                return False
            r = self.provider.runner(cluster_id, iid)
            if self.systemd(cluster_id):
                return units.active(r, "slurmdbd")
            return control.read_pid(r, acct.SLURMDBD_PID_FILE, "slurmdbd") is not None
        except ProviderError:
            return False

    def teardown(self, cluster_id: str) -> None:
        """Terminates the accounting instance (idempotent). Its volume goes with the cluster's teardown."""
        with self._lock(cluster_id):
            self._configs.pop(cluster_id, None)
            self._modes.pop(cluster_id, None)
            with self._guard:
                self._addresses.pop(cluster_id, None)
                self._images.pop(cluster_id, None)
            self.provider.terminate(cluster_id, self.instance_id(cluster_id))
            (self.dir / cluster_id / PASSWORD_FILE).unlink(missing_ok=True)
            (self.dir / cluster_id / IMAGE_FILE).unlink(missing_ok=True)

    def password(self, cluster_id: str) -> str:
        """The cluster's database password: made once, kept in a 0600 file in the cluster's state dir."""
        d = self.dir / cluster_id
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return secret_file(d / PASSWORD_FILE, lambda: secrets.token_urlsafe(24).encode()).decode().strip()

    # ---- steps --------------------------------------------------------------------------------

    def _lock(self, cluster_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(cluster_id, threading.Lock())

    def _ensure_quietly(self, cluster_id: str, cluster_name: str, munge_key: bytes,
                        external: ExternalDatabase | None, image: Image | None) -> None:
        try:
            self.ensure(cluster_id, cluster_name, munge_key, external, image)
        except Exception as exc:  # reported again by the foreground ensure()
            log.warning("cluster %s: accounting host not ready yet: %s", cluster_name, exc)

    def _request(self, cluster_id: str, cluster_name: str, munge_key: bytes, external: ExternalDatabase | None,
                 image: Image, template: bool, seed_sql: bytes) -> InstanceRequest:
        # a new database volume starts as the image's template datadir, copied by the provider before the host
        # boots (the host's seed unit then has nothing to do), when the host's boot brings MariaDB up from it
        # (``template``: ``_template_boot``)
        seeded = external is None and template
        volume = dataclasses.replace(DB_VOLUME, seed=acct.MARIADB_TEMPLATE) if seeded else DB_VOLUME
        return InstanceRequest(
            cluster_id=cluster_id, instance_id=self.instance_id(cluster_id), group=ACCOUNTING_GROUP,
            instance_type=self.instance_type, image_id=image.image_id, image_root=image.root,
            volumes=(volume,), labels={"slurmpod/cluster": cluster_name, "slurmpod/group": ACCOUNTING_GROUP},
            files=tuple(self._boot_files(cluster_id, munge_key, external, image, template, seed_sql)),
        )

    def _boot_files(self, cluster_id: str, munge_key: bytes, external: ExternalDatabase | None,
                    image: Image, template: bool, seed_sql: bytes) -> list[NodeFile]:
        """On a systemd image with MariaDB's template datadir: everything the host needs to come up with munge,
        MariaDB and slurmdbd running at the end of its boot (``acct.boot_files``, MariaDB's ``init-file`` renaming
        the template's seed cluster to this one: ``seed_sql``); else only the munge key."""
        if not _systemd(image):
            return []
        if external is None and not template:  # ``_template_boot``
            return [control.munge_key_file(munge_key)]
        conf, password = self._dbd_conf(cluster_id, external, image)
        return acct.boot_files(munge_key, conf, password=password, seed_sql=seed_sql)

    @staticmethod
    def _template_boot(image: Image) -> bool:
        """Does the host's own boot bring MariaDB up from the image's template datadir (a systemd image that has
        one)?"""
        return _systemd(image) and (Path(image.root) / acct.MARIADB_TEMPLATE.lstrip("/") / "mysql").is_dir()

    def _dbd_conf(self, cluster_id: str, external: ExternalDatabase | None,
                  image: Image) -> tuple[str, str | None]:
        """slurmdbd.conf, and the local database's password (None with an external database)."""
        pid_file = _pid_file(image)
        if external is None:
            password = self.password(cluster_id)
            return acct.render_slurmdbd_conf(acct.DBD_HOST, password, pid_file=pid_file), password
        return acct.render_slurmdbd_conf(acct.DBD_HOST, external.password, storage_host=external.host,
                                         storage_port=external.port, storage_user=external.user,
                                         storage_loc=external.name, pid_file=pid_file), None

    def _ensure(self, cluster_id: str, cluster_name: str, munge_key: bytes,
                external: ExternalDatabase | None, image: Image) -> AccountingConfig:
        t0 = time.monotonic()
        self.provider.prepare_cluster(cluster_id)
        template = self._template_boot(image)
        seed_sql = _seed_sql(image, cluster_name) if external is None and template else b""
        request = self._request(cluster_id, cluster_name, munge_key, external, image, template, seed_sql)
        running = self.image_of(cluster_id)
        iid = self.instance_id(cluster_id)
        if running.image_id != image.image_id and any(i.instance_id == iid
                                                      for i in self.provider.list_instances(cluster_id)):
            # slurmdbd first: a later Slurm release replaces the host's root volume (the database volume stays)
            log.info("cluster %s: accounting host %s: Slurm %s -> %s (image %s -> %s)", cluster_name, iid,
                     running.slurm_version or "?", image.slurm_version or "?", running.image_id, image.image_id)
            with self._guard:
                self._addresses.pop(cluster_id, None)
            inst: ProviderInstance = self.provider.replace_root_volume(request)
        else:
            inst = self.provider.launch(request)
        self._record_image(cluster_id, image)
        with self._launched:
            self._addresses[cluster_id] = inst.ip
            self._launched.notify_all()
        r = self.provider.runner(cluster_id, inst.instance_id)
        systemd = _systemd(image)
        conf, password = self._dbd_conf(cluster_id, external, image)
        if any(f.path == acct.INIT_SQL for f in request.files) and self._booted_ready(
                r, conf, None if seed_sql else cluster_name):
            log.info("cluster %s: accounting host up in %.2fs (its boot started munge, MariaDB and slurmdbd)",
                     cluster_name, time.monotonic() - t0)
            if any(v.seed for v in request.volumes):
                self.warm(image)  # the next cluster's database, now that this one's MariaDB started
            return AccountingConfig(host_ip=inst.ip, port=SLURMDBD_PORT)
        control.start_munge(r, munge_key)  # a no-op when munge.service started on the key at boot
        t1 = time.monotonic()
        if password is not None:
            self._ensure_mariadb(r, password, systemd)
        else:
            # the host's own MariaDB (if it ran before the database was attached) is no longer used
            control.stop_daemon(r, acct.MYSQL_PID_FILE, "mariadbd", timeout=60)
        t2 = time.monotonic()
        if systemd:
            self._ensure_slurmdbd_unit(r, conf, external)
        else:
            self._ensure_slurmdbd(r, conf, external)
        log.info("cluster %s: accounting host up in %.2fs (launch+munge %.2fs, database %.2fs, slurmdbd %.2fs)",
                 cluster_name, time.monotonic() - t0, t1 - t0, t2 - t1, time.monotonic() - t2)
        return AccountingConfig(host_ip=inst.ip, port=SLURMDBD_PORT)

    def _booted_ready(self, r: CommandRunner, conf: str, cluster_name: str | None) -> bool:
        """A host whose boot files brought its daemons up: ready once one in-node wait says so (at most
        ``BOOTED_WAIT`` s; given a ``cluster_name``, it adds the cluster to the database too: None when MariaDB's
        ``init-file`` made it from the image's seed cluster); False sends ``_ensure`` down the step-by-step path,
        which repairs and reports."""
        wait = min(self.ready_timeout, BOOTED_WAIT)
        argv = acct.booted_ready_argv(hashlib.sha256(conf.encode()).hexdigest(), wait,
                                      slurm_cluster_name(cluster_name) if cluster_name is not None else None)
        try:
            return _run(r, argv, timeout=wait + 10).returncode == 0
        except ProviderError:
            return False

    def _ensure_mariadb(self, r: CommandRunner, password: str, systemd: bool = False) -> None:
        # /run/mysqld, the logs, the volume's mount point (one command)
        write_files(r, [], [(acct.MYSQL_RUN_DIR, 0o755, "mysql"), (acct.MYSQL_LOG_DIR, 0o750, "mysql"),
                            (acct.MYSQL_DATADIR, 0o750, "mysql")])
        # the database volume outlives root volumes: after a software update to another suite its files belong to
        # the old image's mysql uid (trixie's 100, sid's 992), which the new mariadbd cannot open
        _check(r, ["sh", "-c", 'd=$1; [ -z "$(find "$d" -xdev \\( ! -user mysql -o ! -group mysql \\) -print -quit)" ] '
                   '|| exec chown -R mysql:mysql "$d"', "sh", acct.MYSQL_DATADIR], "giving the datadir to mysql",
               timeout=300)
        running = (units.active(r, "mariadb") if systemd
                   else control.read_pid(r, acct.MYSQL_PID_FILE, "mariadbd") is not None)
        if not running:
            if _run(r, ["test", "-e", acct.INIT_MARKER]).returncode != 0:
                # never initialised, or an init that died half-way: start from an empty datadir (slurmdbd only
                # ever starts after the marker exists, so no accounting data is lost; stop a stray one anyway)
                control.stop_daemon(r, acct.SLURMDBD_PID_FILE, "slurmdbd", timeout=30)
                # an init interrupted by a server crash may still be running in the node: end it first
                # ('[m]ariadb…' so the pattern never matches the shell that carries it: killing that shell first
                # left a bootstrap mariadbd writing the datadir while it was re-initialised -> root access denied)
                _run(r, ["sh", "-c", "pkill -9 -x mariadbd; pkill -9 -f '[m]ariadb-install-db'; "
                         "for i in $(seq 50); do pgrep -x mariadbd >/dev/null || "
                         "pgrep -f '[m]ariadb-install-db' >/dev/null || exit 0; sleep 0.1; done; exit 1"])
                _check(r, ["find", acct.MYSQL_DATADIR, "-mindepth", "1", "-maxdepth", "1", "-exec", "rm", "-rf",
                           "{}", "+"], "clearing the datadir")
                # the image's pristine datadir when it has one (a sparse copy), else mariadb-install-db
                seeded = _run(r, ["sh", "-c", f'test -d {acct.MARIADB_TEMPLATE}/mysql || exit 3; '
                                  f'cp -a --sparse=always {acct.MARIADB_TEMPLATE}/. {acct.MYSQL_DATADIR}/'],
                              timeout=120)
                if seeded.returncode != 0:
                    _check(r, acct.install_db_argv(), "mariadb-install-db", timeout=180)
            if systemd:  # the image's mariadb.service (the node layer's drop-in and settings; not waited for here)
                units.systemctl(r, "reset-failed", "mariadb", check=False)
                units.enable(r, "mariadb")
                units.systemctl(r, "start", "--no-block", "mariadb")
            else:
                _check(r, acct.background_argv(acct.MYSQL_STDOUT_LOG, acct.mariadbd_argv()), "starting mariadbd")
        self._wait(r, lambda: _run(r, acct.client_argv(), input=b"SELECT 1;\n").returncode == 0,
                   "mariadbd does not accept connections", acct.MYSQL_ERROR_LOG,
                   lambda: control.read_pid(r, acct.MYSQL_PID_FILE, "mariadbd") is not None
                   or _run(r, ["pgrep", "-x", "mariadbd"]).returncode == 0,
                   unit="mariadb" if systemd else None)
        _check(r, ["touch", acct.INIT_MARKER], "marking the datadir initialised")
        res = _run(r, acct.client_argv(), input=acct.slurm_user_sql(password))
        if res.returncode != 0:
            detail = (res.stderr or res.stdout).replace(password, "***").strip()[-300:]
            raise AccountingError(f"creating the slurm database user failed (exit {res.returncode}): {detail}")

    def _ensure_slurmdbd(self, r: CommandRunner, text: str, external: ExternalDatabase | None) -> None:
        running = control.read_pid(r, acct.SLURMDBD_PID_FILE, "slurmdbd") is not None
        if _write_dbd_conf(r, text):
            if running:
                control.stop_daemon(r, acct.SLURMDBD_PID_FILE, "slurmdbd", timeout=30)
                running = False
        if not running and _run(r, ["pgrep", "-x", "slurmdbd"]).returncode != 0:
            _check(r, ["/usr/sbin/slurmdbd"], "starting slurmdbd", log_file=acct.SLURMDBD_LOG_FILE)
        what = _dbd_not_ready(external)
        self._wait(r, lambda: _run(r, acct.port_probe_argv(SLURMDBD_PORT)).returncode == 0,
                   what, acct.SLURMDBD_LOG_FILE,
                   lambda: _run(r, ["pgrep", "-x", "slurmdbd"]).returncode == 0)

    def _ensure_slurmdbd_unit(self, r: CommandRunner, text: str, external: ExternalDatabase | None) -> None:
        """slurmdbd as the image's ``slurmdbd.service`` (Restart=on-failure); a changed conf restarts it."""
        units.start(r, "slurmdbd", restart=_write_dbd_conf(r, text))
        what = _dbd_not_ready(external)
        self._wait(r, lambda: _run(r, acct.port_probe_argv(SLURMDBD_PORT)).returncode == 0,
                   what, acct.SLURMDBD_LOG_FILE, lambda: units.active(r, "slurmdbd"), unit="slurmdbd")

    def _wait(self, r: CommandRunner, ready: Callable[[], bool], what: str, log_file: str,
              running: Callable[[], bool], unit: str | None = None) -> None:
        """Polls ``ready`` until ``ready_timeout``; fails early when the process is gone for 2 s. The failure
        carries the log's tail (and the unit's journal on a systemd node)."""
        deadline = time.monotonic() + self.ready_timeout

        def tail() -> str:
            text = control.log_tail(r, log_file)
            return text + ("\n" + units.journal(r, unit) if unit else "")

        gone_since: float | None = None
        while not ready():
            now = time.monotonic()
            if now >= deadline:
                raise AccountingError(f"{what} after {self.ready_timeout:.0f}s", tail())
            if running():
                gone_since = None
            elif gone_since is None:
                gone_since = now
            elif now - gone_since > 2.0:
                raise AccountingError(f"{what}: the process exited", tail())
            time.sleep(POLL)



def _seed_sql(image: Image, cluster_name: str) -> bytes:
    """The ``init-file`` SQL that makes the image's seed cluster this cluster (``acct.seed_cluster_sql``); empty when
    the image has no seed cluster (one built before recipe 13) or the name cannot be a table name's prefix: then the
    host adds the cluster with ``sacctmgr`` (``_booted_ready``), as before."""
    seed = acctschema.seed_cluster(Path(image.root))
    if seed is None:
        return b""
    try:
        return acct.seed_cluster_sql(seed, slurm_cluster_name(cluster_name))
    except ValueError as exc:
        log.warning("cluster %s: the image's seed cluster is not used: %s", cluster_name, exc)
        return b""


def _systemd(image: Image) -> bool:
    """An image root filesystem boots systemd (the daemons are units); the legacy host-root image does not."""
    return image.kind == "rootfs"


def _pid_file(image: Image) -> str:
    """slurmdbd's PidFile: in its RuntimeDirectory when the image's unit has one (Debian 13 on: the unit runs it as
    the slurm user, who cannot write ``/run`` itself); else ``/run`` (Debian 12's unit, the legacy image: it starts
    as root and writes its pid file before it drops to the slurm user)."""
    if _systemd(image):
        for unit in ("etc/systemd/system/slurmdbd.service", "usr/lib/systemd/system/slurmdbd.service"):
            try:
                text = (Path(image.root) / unit).read_text()
            except OSError:
                continue
            if any(line.strip() == "RuntimeDirectory=slurmdbd" for line in text.splitlines()):
                return acct.SLURMDBD_RUNTIME_PID_FILE
            break
    return acct.SLURMDBD_PID_FILE


def _write_dbd_conf(r: CommandRunner, text: str) -> bool:
    """Writes slurmdbd.conf (0600 slurm) unless the node has that text already; True if it changed."""
    conf = text.encode()
    current = _run(r, ["sha256sum", acct.SLURMDBD_CONF])
    if current.returncode == 0 and current.stdout.split()[:1] == [hashlib.sha256(conf).hexdigest()]:
        return False
    control.ensure_dir(r, "/etc/slurm")
    control.ensure_dir(r, "/var/log/slurm", 0o755, "slurm")
    control.write_file(r, acct.SLURMDBD_CONF, conf, 0o600, "slurm")
    return True


def _dbd_not_ready(external: ExternalDatabase | None) -> str:
    what = f"slurmdbd does not accept connections on port {SLURMDBD_PORT}"
    if external is not None:
        what += (f" (it stores into the external database {external.name} at {external.host}:{external.port}: "
                 "check that it is reachable from the accounting host and the secret's user may use it)")
    return what


def _run(r: CommandRunner, argv: list[str], *, input: bytes | None = None, timeout: float = 30.0) -> CommandResult:
    return r.run(argv, timeout=timeout, input=input)


def _check(r: CommandRunner, argv: list[str], what: str, *, timeout: float = 30.0,
           log_file: str | None = None) -> CommandResult:
    res = _run(r, argv, timeout=timeout)
    if res.returncode != 0:
        detail = (res.stderr or res.stdout).strip()[-500:]
        raise AccountingError(f"{what} failed (exit {res.returncode}): {detail}",
                              control.log_tail(r, log_file) if log_file else "")
    return res
