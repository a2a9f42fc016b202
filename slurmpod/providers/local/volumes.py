"""A new volume made as a copy of a directory of the node's image (``VolumeMount.seed``), on the host, before the
node boots: the accounting host's MariaDB datadir starts from the image's template without a copy inside the
booting node, on MariaDB's critical path (~0.1 s on an idle host, 0.3 s and more while the cluster's other nodes
boot too).

``SeedPool`` takes even that copy off the boot path: whole copies made ahead of time, at the lowest CPU and I/O
priority, beside the volumes (the same filesystem), so that seeding a volume is one ``rename``. One ready copy per
source, made when asked for (``fill``, ``refill_soon``): not as a copy is taken, while the node that took it boots
(the copy's dirty pages would be written out by the fsyncs of MariaDB's start, ext4's ordered mode: measured
MariaDB's start 0.25 -> 0.4 s)."""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from slurmpod.providers.base import SEEDED_MARKER, ProviderError, TemporaryProviderError
from slurmpod.providers.local.commands import host_run
from slurmpod.providers.local.priority import when_idle

log = logging.getLogger(__name__)

SEED_TIMEOUT = 300.0
#: a copy in the making older than this was left by a process that died: removed by the next fill
STALE_PARTIAL = SEED_TIMEOUT + 60.0


def _source(image_root: str, seed: str) -> Path | None:
    source = Path(image_root) / seed.lstrip("/")
    return source if source.is_dir() and not source.is_symlink() else None


def _run(argv: list[str]) -> None:
    host_run(argv, timeout=SEED_TIMEOUT)


def _copy(source: Path, dest: Path, run: Callable[[list[str]], None] = _run, *, flush: bool = False) -> None:
    """``dest`` (absent) becomes a whole copy of ``source`` with ``SEEDED_MARKER`` in it, or stays absent.
    ``flush``: written out before it is renamed (not by the next fsync of a node's database)."""
    partial = dest.with_name(f".{dest.name}.seeding-{secrets.token_hex(4)}")
    try:
        run(["cp", "-a", "--sparse=always", "--", str(source), str(partial)])
        (partial / SEEDED_MARKER).touch()
        if flush:
            run(["sync", "-f", str(partial)])
        os.rename(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def seed_volume(volume: Path, image_root: str, seed: str, pool: SeedPool | None = None) -> bool:
    """``volume``, absent, becomes a whole copy of ``seed`` (a path in the image at ``image_root``) with
    ``SEEDED_MARKER`` in it, or stays absent: ``pool``'s ready copy renamed into place, else a copy made beside it
    and renamed. False (nothing done) when the volume exists or the image has no such directory."""
    source = _source(image_root, seed)
    if volume.exists() or source is None:
        return False
    volume.parent.mkdir(parents=True, exist_ok=True)
    if pool is not None and pool.take(volume, image_root, seed):
        return True
    _copy(source, volume)
    return True


class SeedPool:
    """Ready copies of image directories under ``root`` (``<key>.<token>``, whole; ``.<...>.seeding-*`` while
    being made), ``<key>.source`` naming what the key stands for. Several processes may share a pool: a copy is
    taken by a rename, which only one of them wins."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._wanted: dict[str, tuple[str, str]] = {}
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False

    @staticmethod
    def key(image_root: str, seed: str) -> str:
        return hashlib.sha256(f"{image_root}\0{seed}".encode()).hexdigest()[:16]

    def ready(self, image_root: str, seed: str) -> list[Path]:
        """The whole copies of ``seed`` of that image waiting in the pool."""
        if not self.root.is_dir():
            return []
        prefix = f"{self.key(image_root, seed)}."
        return sorted(p for p in self.root.iterdir()
                      if p.name.startswith(prefix) and p.name != f"{prefix}source" and p.is_dir())

    def take(self, volume: Path, image_root: str, seed: str) -> bool:
        """A ready copy renamed to ``volume`` (absent): True, else False (the pool has none)."""
        for entry in self.ready(image_root, seed):
            try:
                os.rename(entry, volume)
                return True
            except FileNotFoundError:  # another process took it first
                continue
            except OSError as exc:  # e.g. the volumes moved to another filesystem: copied as without a pool
                log.warning("seed pool: cannot rename %s to %s: %s", entry, volume, exc)
                return False
        return False

    def fill(self, image_root: str, seed: str) -> bool:
        """Makes one ready copy unless there is one (or the image has no such directory): True if it made one."""
        source = _source(image_root, seed)
        if source is None or self.ready(image_root, seed):
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        key = self.key(image_root, seed)
        self._prune(key)
        (self.root / f"{key}.source").write_text(f"{image_root}\n{seed}\n")
        _copy(source, self.root / f"{key}.{secrets.token_hex(4)}", self._run_idle, flush=True)
        return True

    def _run_idle(self, argv: list[str]) -> None:
        """``argv`` at idle priority (``when_idle``); ``close`` ends it."""
        with self._cond:
            if self._closed:
                raise TemporaryProviderError("the seed pool is closed")
            proc = subprocess.Popen(when_idle(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # noqa: S603
                                    stderr=subprocess.PIPE)
            self._proc = proc
        try:
            _, err = proc.communicate(timeout=SEED_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait()
            raise TemporaryProviderError(f"timed out after {SEED_TIMEOUT:.0f}s: {' '.join(argv)}") from exc
        finally:
            with self._cond:
                self._proc = None
        if proc.returncode != 0:
            raise TemporaryProviderError(f"{' '.join(argv)} failed ({proc.returncode}): "
                                         f"{err.decode(errors='replace').strip()[-300:]}")

    def _prune(self, keep: str) -> None:
        """Removes copies in the making that a dead process left, and the copies of images that are gone."""
        now = time.time()
        for p in self.root.iterdir():
            if ".seeding-" in p.name:
                try:
                    if now - p.stat().st_mtime > STALE_PARTIAL:
                        shutil.rmtree(p, ignore_errors=True)
                except FileNotFoundError:
                    pass
            elif p.name.endswith(".source") and not p.name.startswith(keep):
                lines = p.read_text().splitlines() if p.is_file() else []
                if len(lines) >= 2 and _source(lines[0], lines[1]) is None:
                    key = p.name.removesuffix(".source")
                    for entry in self.root.glob(f"{key}.*"):
                        if entry.is_dir():
                            shutil.rmtree(entry, ignore_errors=True)
                    p.unlink(missing_ok=True)

    def refill_soon(self, image_root: str, seed: str) -> None:
        """``fill`` in the background (one worker thread; ``close`` ends a copy under way)."""
        with self._cond:
            if self._closed:
                return
            self._wanted[self.key(image_root, seed)] = (image_root, seed)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="seed-pool", daemon=True)
                self._worker.start()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                if self._closed or not self._wanted:
                    self._worker = None
                    return
                _, (image_root, seed) = self._wanted.popitem()
            try:
                self.fill(image_root, seed)
            except (OSError, ProviderError) as exc:  # the next launch copies for itself
                if not self._closed:
                    log.warning("seed pool: no copy of %s of %s made ahead: %s", seed, image_root, exc)

    def resume(self) -> None:
        """Fills again after ``close`` (a server started again in the same process)."""
        with self._cond:
            self._closed = False

    def close(self, timeout: float = 30.0) -> None:
        """No new fills; a copy under way is ended (its partial copy removed) and waited for."""
        with self._cond:
            self._closed = True
            self._wanted.clear()
            worker, proc = self._worker, self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()  # setsid did not fork (the caller is no group leader): this is cp, sync or their shell
        if worker is not None:
            worker.join(timeout)
