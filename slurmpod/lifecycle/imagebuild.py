"""``slurmpod images build``: a node root filesystem from Debian's packages with mmdebstrap, then the node layer.

mmdebstrap (``--variant=apt``, slim dpkg path-excludes) installs ``BASE_PACKAGES`` plus the requested ones from
deb.debian.org (``SUITE``, ``SUITE-updates``, ``SUITE-security``, those the mirror serves; dpkg without fsync
while building) into a staging dir of
the image store. apt's downloads are kept in a host-wide cache (``/var/cache/slurmpod/apt``), bind-mounted onto
the chroot's ``/var/cache/apt/archives`` with ``--skip=essential/unlink,download/empty,cleanup/apt/cache``: a
second build downloads nothing (the recipe measured ~40 s warm). ``--script FILE`` runs inside the image
(chroot, bash, mmdebstrap's customize hook: /dev, /proc, /sys and the cache are there) after the packages. Then
``nodelayer.apply_node_layer``, the tree digest (the id), the manifest, and the atomic rename into the store.

Progress is mmdebstrap's own ``I:`` lines mapped to phases (resolving, downloading, unpacking, configuring),
then layer and digest. Any failure leaves nothing behind and is one ``BuildError`` line; ``code`` 2 is bad
input (unknown suite, no such package, a failing script), 1 anything else, 130 an interrupt.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurmpod.lifecycle.imagestore import PRIMARY_SUITE, ImageStore, Manifest, Staging
from slurmpod.lifecycle.nodelayer import RECIPE_VERSION, LayerError, apply_node_layer
from slurmpod.lifecycle.rootfs import RootfsError, dpkg_versions, image_id_for, os_release, scan_tree

BASE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "libpam-systemd", "munge", "slurmd", "slurmctld", "slurm-client", "slurmdbd",
    "mariadb-server", "sudo", "openssh-server", "openssh-client", "python3", "python3-pip", "curl",
    "ca-certificates", "logrotate", "iproute2", "procps", "less", "iputils-ping", "gettext-base", "passwd",
    "adduser", "lsof",
    # deep health checks (InstanceStress); the headers slurmpod's SPANK plugin is built against (nodelayer)
    "stress-ng", "libslurm-dev",
    # containers in jobs: podman/crun (srun --container-image), catatonit (the holder's process), squashfs-tools
    # (.sqsh images), Docker
    "podman", "crun", "catatonit", "squashfs-tools", "docker.io",
)
#: base packages some suites lack (package -> those suites): Debian 13 moved Docker's command line out of
#: docker.io into docker-cli
NOT_IN_SUITES = {"docker-cli": ("bookworm",)}
MIRROR = os.environ.get("SLURMPOD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("SLURMPOD_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
DEFAULT_CACHE = Path(os.environ.get("SLURMPOD_APT_CACHE", "/var/cache/slurmpod/apt"))
BUILD_TIMEOUT = 3600.0
SLIM = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
        "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
        "path-exclude=/usr/share/info/*")
# no fsync per file while building (measured: 54.5 s -> 45.5 s warm); dropped from the image's dpkg config at the end
BUILD_ONLY_DPKGOPT = "force-unsafe-io"
SCRIPT_IN_IMAGE = "/tmp/.slurmpod-build-script"
#: suites whose Release file expires within days (Valid-Until): a mirror or proxy copy a little older than that
#: is still used (stable suites carry no Valid-Until; their apt options, hence their images, stay as they were)
SHORT_LIVED_SUITES = ("sid", "unstable", "experimental", "rc-buggy")
_SUITE_RE = re.compile(r"^[a-z][a-z0-9-]{1,30}$")
_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_MISSING_RE = (re.compile(r"Unable to locate package (\S+)"),
               re.compile(r"Package '?([^' ]+)'? has no installation candidate"),
               re.compile(r"Couldn't find any package by (?:glob|regex) '([^']+)'"))
PHASES = (  # mmdebstrap's message -> our phase line
    ("running apt-get update", "resolving: package lists of {sources}"),
    ("downloading packages", "downloading: packages into {cache}"),
    ("extracting archives", "unpacking: essential packages"),
    ("installing essential packages", "configuring: essential packages"),
    ("installing remaining packages", "configuring: {count} requested packages and their dependencies (dpkg)"),
)

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """Why a build or import failed, in one line; ``code`` is the CLI's exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class BuildRequest:
    suite: str = PRIMARY_SUITE
    packages: tuple[str, ...] = ()
    script: Path | None = None
    release: str = "1.0.1"
    description: str = ""
    cache: Path = DEFAULT_CACHE
    verbose: bool = False

    def all_packages(self) -> tuple[str, ...]:
        suite = tuple(p for p, lacking in NOT_IN_SUITES.items() if self.suite not in lacking)
        return tuple(dict.fromkeys((*BASE_PACKAGES, *suite, *self.packages)))


def check_request(req: BuildRequest) -> None:
    """Bad input is refused before anything is created (exit code 2)."""
    if not _SUITE_RE.match(req.suite):
        raise BuildError(f"bad suite name {req.suite!r} (a Debian suite: bookworm, trixie, ...)", 2)
    bad = [p for p in req.packages if not _PACKAGE_RE.match(p)]
    if bad:
        raise BuildError(f"bad package name {bad[0]!r}", 2)
    if req.script is not None and not req.script.is_file():
        raise BuildError(f"--script {req.script}: no such file", 2)


def sources(suite: str, exists: Callable[[str], bool]) -> list[str]:
    """apt source lines for the suite and those of ``-updates``/``-security`` the mirror serves."""
    if not exists(f"{MIRROR}/dists/{suite}/InRelease"):
        raise BuildError(f"unknown suite {suite!r}: {MIRROR} has no dists/{suite} (try bookworm or trixie)", 2)
    lines = [f"deb {MIRROR} {suite} main"]
    if exists(f"{MIRROR}/dists/{suite}-updates/InRelease"):
        lines.append(f"deb {MIRROR} {suite}-updates main")
    if exists(f"{SECURITY_MIRROR}/dists/{suite}-security/InRelease"):
        lines.append(f"deb {SECURITY_MIRROR} {suite}-security main")
    return lines


def url_exists(url: str) -> bool:
    """HEAD ``url``: True on 2xx, False on 404/410; unreachable mirrors are a BuildError."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=20) as resp:  # noqa: S310
            return 200 <= resp.status < 300
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            return False
        raise BuildError(f"cannot check {url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise BuildError(f"cannot reach {url.split('/dists/')[0]}: {getattr(exc, 'reason', exc)}") from exc


def mmdebstrap_argv(req: BuildRequest, target: Path, source_lines: Sequence[str], script: Path | None) -> list[str]:
    cache = shlex.quote(str(req.cache))
    argv = ["mmdebstrap", "--mode=root", "--variant=apt", "--format=directory",
            f"--include={','.join(req.all_packages())}", "--components=main",
            f"--dpkgopt={BUILD_ONLY_DPKGOPT}", *(f"--dpkgopt={o}" for o in SLIM), '--aptopt=Acquire::Retries "3"',
            *(['--aptopt=Acquire::Check-Valid-Until "false"'] if req.suite in SHORT_LIVED_SUITES else []),
            "--skip=essential/unlink", "--skip=download/empty", "--skip=cleanup/apt/cache",
            '--setup-hook=mkdir -p "$1"/var/cache/apt/archives && '
            f'mount --bind {cache} "$1"/var/cache/apt/archives']
    if script is not None:
        inside = shlex.quote(SCRIPT_IN_IMAGE)
        argv.append(
            f'--customize-hook=cp {shlex.quote(str(script))} "$1"{inside} && echo "slurmpod: script begin" >&2; '
            f'chroot "$1" /usr/bin/env DEBIAN_FRONTEND=noninteractive /bin/bash {inside}; rc=$?; '
            f'rm -f "$1"{inside}; echo "slurmpod: script exit $rc" >&2; exit $rc')
    argv.append('--customize-hook=umount "$1"/var/cache/apt/archives; rm -f "$1"/var/cache/apt/*.bin; '
                f'sed -i "/^{BUILD_ONLY_DPKGOPT}$/d" "$1"/etc/dpkg/dpkg.cfg.d/99mmdebstrap')
    argv += [req.suite, str(target), *source_lines]
    return argv


class ProgressFilter:
    """Turns mmdebstrap's output into a few phase lines (and the script's own output), and remembers what a
    failure needs: apt's error lines and the script's exit code."""

    def __init__(self, progress: Progress, *, sources: Sequence[str], cache: Path, count: int,
                 verbose: bool = False) -> None:
        self.progress, self.verbose = progress, verbose
        self.fmt = {"sources": ", ".join(s.split()[2] for s in sources), "cache": str(cache), "count": count}
        self.errors: list[str] = []
        self.tail: list[str] = []
        self.in_script = False
        self.script_rc: int | None = None
        self.seen: set[str] = set()
        self.t0 = time.monotonic()  # each phase line says when it began, seconds into the build

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        self.tail = [*self.tail[-29:], line]
        if self.verbose:
            self.progress(f"  | {line}")
        if line.startswith("slurmpod: script begin"):
            self.in_script = True
            self.progress("script: running --script inside the image")
            return
        if line.startswith("slurmpod: script exit "):
            self.in_script = False
            self.script_rc = int(line.rsplit(" ", 1)[1])
            return
        if self.in_script:
            if not self.verbose:
                self.progress(f"  script| {line}")
            return
        if line.startswith("E: "):
            self.errors.append(line[3:].strip())
        for needle, phase in PHASES:
            if needle in line and needle not in self.seen:
                self.seen.add(needle)
                self.progress(f"{phase.format(**self.fmt)} (at {time.monotonic() - self.t0:.1f} s)")

    def failure(self, returncode: int, suite: str) -> BuildError:
        text = "\n".join(self.errors + self.tail)
        missing = sorted({m.group(1) for rx in _MISSING_RE for m in rx.finditer(text)})
        if missing:
            return BuildError(f"no such package in {suite}: {', '.join(missing)}", 2)
        if self.script_rc not in (None, 0):
            return BuildError(f"--script failed with exit code {self.script_rc} (its output is above)", 2)
        first = next((e for e in self.errors if "mmdebstrap" not in e), self.errors[0] if self.errors else "")
        last = self.tail[-1] if self.tail else "no output"
        return BuildError(f"mmdebstrap failed (exit code {returncode}): {first or last}")


@contextmanager
def _cache_lock(cache: Path) -> Iterator[None]:
    """One build at a time per cache (apt locks the archives dir the builds share)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(f"{cache}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C (so the staging dir is removed) while a build runs in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Ends mmdebstrap and what it started (its own session: its process group id is its pid)."""
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_mmdebstrap(argv: Sequence[str], filt: ProgressFilter, timeout: float = BUILD_TIMEOUT) -> int:
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", start_new_session=True, env={**os.environ, "LC_ALL": "C"})
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            filt.feed(line)
        return proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        timer.cancel()


def chroot_runner(root: Path) -> Callable[[Sequence[str]], str]:
    def run(argv: Sequence[str]) -> str:
        done = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, timeout=120, check=False,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
        if done.returncode != 0:
            raise LayerError(f"`{' '.join(argv)}` failed in the image: {(done.stderr or done.stdout).strip()}")
        return done.stdout
    return run


def finish(store: ImageStore, stage: Staging, progress: Progress, **manifest: object) -> Manifest:
    """Node layer, digest, manifest and the move into the store (common to build and import)."""
    progress("layer: slurmpod node layer (masks, /opt/slurm, slurmd.service, ubuntu, per-node files)")
    t = time.monotonic()
    try:
        apply_node_layer(stage.rootfs, chroot_runner(stage.rootfs))
    except (OSError, RootfsError) as exc:
        raise BuildError(f"node layer failed: {exc}") from exc
    progress(f"layer: done ({time.monotonic() - t:.1f} s)")
    t = time.monotonic()
    scan = scan_tree(stage.rootfs)
    image_id = image_id_for(scan.digest)
    progress(f"digest: {scan.files} files, {scan.size / 2**20:.0f} MiB -> {image_id} ({time.monotonic() - t:.1f} s)")
    versions = dpkg_versions(stage.rootfs, ("slurmctld", "systemd"))
    osr = os_release(stage.rootfs)
    suite = str(manifest.pop("suite", "") or osr.get("VERSION_CODENAME", ""))
    m = Manifest.from_dict({"id": image_id, "suite": suite, "slurm_version": versions.get("slurmctld", ""),
                            "size": scan.size, "created": time.time(), "digest": scan.digest, "files": scan.files,
                            "recipe": RECIPE_VERSION, "os": osr.get("PRETTY_NAME", ""),
                            "systemd_version": versions.get("systemd", ""), **manifest})
    return store.commit(stage, m)


def build_image(store: ImageStore, req: BuildRequest, progress: Progress,
                exists: Callable[[str], bool] = url_exists) -> Manifest:
    check_request(req)
    if os.geteuid() != 0:
        raise BuildError("building an image needs root (mmdebstrap --mode=root)")
    if shutil.which("mmdebstrap") is None:
        raise BuildError("mmdebstrap is not installed (scripts/install.sh installs it: apt-get install mmdebstrap)")
    progress(f"resolving: {req.suite} on {MIRROR}")
    lines = sources(req.suite, exists)
    started = time.monotonic()
    with sigterm_interrupts():
        try:
            with _cache_lock(req.cache), store.staging() as stage:
                script = None
                if req.script is not None:
                    script = stage.path / "script"
                    shutil.copyfile(req.script, script)
                filt = ProgressFilter(progress, sources=lines, cache=req.cache, count=len(req.all_packages()),
                                      verbose=req.verbose)
                rc = run_mmdebstrap(mmdebstrap_argv(req, stage.rootfs, lines, script), filt)
                if rc != 0:
                    raise filt.failure(rc, req.suite)
                (stage.rootfs / SCRIPT_IN_IMAGE.lstrip("/")).unlink(missing_ok=True)
                m = finish(store, stage, progress, suite=req.suite, release=req.release, packages=req.packages,
                           description=req.description or f"Debian {req.suite} + Slurm (slurmpod images build)",
                           source="build")
        except KeyboardInterrupt:
            raise BuildError("interrupted: nothing was stored (the partial build was removed)", 130) from None
    progress(f"done: {m.id} in {time.monotonic() - started:.1f} s")
    return m
