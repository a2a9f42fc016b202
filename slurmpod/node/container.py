"""``slurmpod-container``: the node side of ``srun --container-image`` (slurmpod's SPANK plugin runs it as root).

* ``start``: once per step and node, in slurmstepd before the tasks start. Checks the options (mount specs, that
  the user can read each mount source), makes the image present in the node's podman storage (a registry image
  is pulled every time: podman fetches only what changed, so a tag pushed again is noticed; an image file is
  imported once per path, size and mtime), and starts a *holder* container: Debian's podman/crun with the
  host's network, PID, IPC and UTS namespaces, the mounts, the node's GPU device files, the user's passwd
  entry, and catatonit (``-P``, a pause process) as its only process. It prints ``pid N`` (the holder), the
  image's ``workdir`` and ``env NAME=VALUE`` lines; the plugin makes every task of the step join the holder's
  mount namespace (``setns``), so the task *is* the job's process (its cgroup, its environment, its
  signals), seeing the image's root filesystem.
* The holder is in the step's cgroup, so it ends with the step; the job's next container step on the node removes
  it. A named one (``--container-name``) is started again by the job's later steps, with its files.
  ``cleanup``: every container of a job, at its end (the plugin's SPANK job epilog).

Errors are one line on stderr (``slurmpod-container: ...``, exit 1), which the plugin shows the user.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pwd
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from .container_spec import (
    REGISTRY_FILE,
    REGISTRY_PORT,
    ImageRef,
    Mount,
    SpecError,
    check_container_name,
    image_env,
    is_image_archive,
    parse_env_names,
    parse_image,
    parse_mounts,
)

PODMAN = "/usr/bin/podman"
PAUSE = "/usr/bin/catatonit"
PAUSE_IN_CONTAINER = "/.slurmpod-pause"
PULL_TIMEOUT = 900.0
RUN_TIMEOUT = 120.0
JOB_LABEL = "slurmpod.job"
NAMED_LABEL = "slurmpod.named"
FILE_IMAGES = "localhost/slurmpod-file"
DEVICE_PREFIXES = ("nvidia", "neuron")


class ContainerError(RuntimeError):
    pass


def podman(*args: str, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout,  # noqa: S603
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise ContainerError(f"{PODMAN} is missing on this node (the node image has no podman)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ContainerError(f"podman {args[0]} did not finish within {timeout:.0f}s") from exc


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("Error: ") if lines else "(no message)"


def default_registry() -> str:
    try:
        return Path(REGISTRY_FILE).read_text().strip() or f"127.0.0.1:{REGISTRY_PORT}"
    except OSError:
        return f"127.0.0.1:{REGISTRY_PORT}"


# ---------------------------------------------------------------------------------------------------- the user

class User:
    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        try:
            entry = pwd.getpwuid(uid)
            self.name, self.home, self.shell = entry.pw_name, entry.pw_dir, entry.pw_shell or "/bin/sh"
            self.groups = os.getgrouplist(entry.pw_name, gid)
        except KeyError:
            self.name, self.home, self.shell, self.groups = str(uid), "/", "/bin/sh", [gid]

    def can_read(self, path: str) -> bool:
        """Whether the user (not root) can read ``path`` (and enter it, for a directory)."""
        test = ["/usr/bin/test", "-r", path, "-a", "-x", path] if os.path.isdir(path) else \
            ["/usr/bin/test", "-r", path]
        r = subprocess.run(test, user=self.uid, group=self.gid, extra_groups=self.groups,  # noqa: S603
                           capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        return r.returncode == 0


def check_sources(mounts: list[Mount], user: User) -> None:
    for m in mounts:
        if not os.path.exists(m.source):
            raise ContainerError(f"--container-mounts: mount source {m.source} does not exist on this node")
        if not user.can_read(m.source):
            raise ContainerError(f"--container-mounts: mount source {m.source} is not readable by {user.name}")


# --------------------------------------------------------------------------------------------------- the image

def ensure_image(ref: ImageRef, user: User) -> str:
    """The local name of ``ref`` in the node's podman storage, pulled or imported as needed."""
    return _ensure_file(ref.path, user) if ref.path else _pull(ref.reference(default_registry()))


def _pull(full: str) -> str:
    r = podman("pull", "--quiet", full, timeout=PULL_TIMEOUT)
    if r.returncode == 0:
        return full
    why = _last_error(r.stderr)
    low = why.lower()
    if "manifest unknown" in low or "not found" in low or "name unknown" in low:
        raise ContainerError(f"image {full} not found in its registry ({why})")
    if "connection refused" in low or "no such host" in low or "dial tcp" in low or "network is unreachable" in low:
        raise ContainerError(f"image {full}: cannot reach its registry ({why})")
    raise ContainerError(f"image {full}: pull failed: {why}")


def _file_key(path: str) -> str:
    st = os.stat(path)
    return hashlib.sha256(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode()).hexdigest()[:20]


def _ensure_file(path: str, user: User) -> str:
    if not os.path.isfile(path):
        raise ContainerError(f"--container-image: image file {path} does not exist on this node")
    if not user.can_read(path):
        raise ContainerError(f"--container-image: image file {path} is not readable by {user.name}")
    local = f"{FILE_IMAGES}/{_file_key(path)}:latest"
    if podman("image", "exists", local).returncode == 0:
        return local
    if path.endswith((".sqsh", ".squashfs")):
        _import_squashfs(path, local)
    elif _is_archive(path):
        _load_archive(path, local)
    else:
        r = podman("import", "--quiet", path, local, timeout=PULL_TIMEOUT)
        if r.returncode != 0:
            raise ContainerError(f"--container-image: importing {path} failed: {_last_error(r.stderr)}")
    return local


def _is_archive(path: str) -> bool:
    try:
        return is_image_archive(path)
    except (OSError, tarfile.TarError) as exc:
        raise ContainerError(f"--container-image: {path} is not a readable tar file ({exc})") from exc


def _load_archive(path: str, local: str) -> None:
    r = podman("load", "--quiet", "--input", path, timeout=PULL_TIMEOUT)
    if r.returncode != 0:
        raise ContainerError(f"--container-image: loading {path} failed: {_last_error(r.stderr)}")
    loaded = r.stdout.strip().splitlines()[-1].split(":", 1)[-1].strip() if r.stdout.strip() else ""
    if not loaded or podman("tag", loaded, local).returncode != 0:
        raise ContainerError(f"--container-image: {path} holds no image podman could tag ({r.stdout.strip()})")


def _import_squashfs(path: str, local: str) -> None:
    with tempfile.TemporaryDirectory(prefix="slurmpod-sqsh-", dir="/var/tmp") as tmp:
        root = f"{tmp}/root"
        try:
            r = subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-d", root, path],  # noqa: S603, S607
                               capture_output=True, text=True, timeout=PULL_TIMEOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise ContainerError("unsquashfs is missing on this node (squashfs-tools)") from exc
        if r.returncode != 0:
            raise ContainerError(f"--container-image: {path} is not a squashfs image ({_last_error(r.stderr)})")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE,  # noqa: S603, S607
                               stderr=subprocess.DEVNULL)
        try:
            imp = subprocess.run([PODMAN, "import", "--quiet", "-", local], stdin=tar.stdout,  # noqa: S603
                                 capture_output=True, text=True, timeout=PULL_TIMEOUT)
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait(timeout=60)
        if imp.returncode != 0:
            raise ContainerError(f"--container-image: importing {path} failed: {_last_error(imp.stderr)}")


# ----------------------------------------------------------------------------------------------- the container

def container_name(job: str, step: str, name: str) -> str:
    return f"slurmpod-{job}-n-{name}" if name else f"slurmpod-{job}-{step}"


def _devices() -> list[str]:
    with contextlib.suppress(OSError):
        return [f"/dev/{d}" for d in sorted(os.listdir("/dev")) if d.startswith(DEVICE_PREFIXES)]
    return []


def run_argv(cname: str, job: str, image: str, user: User, mounts: list[Mount], named: bool) -> list[str]:
    argv = ["run", "--detach", "--pull=never", "--name", cname, "--label", f"{JOB_LABEL}={job}",
            "--label", f"{NAMED_LABEL}={int(named)}",
            "--network=host", "--ipc=host", "--uts=host", "--log-driver=none",
            # the holder stays in the step's cgroup (the tasks are there anyway): no cgroup of its own, no eBPF
            # device program (crun would raise RLIMIT_MEMLOCK for it, which a node cannot). podman then wants a
            # PID namespace of its own for it; the tasks stay in the node's (the plugin mounts them its /proc)
            "--cgroups=disabled",
            "--security-opt", "label=disable", "--user", f"{user.uid}:{user.gid}",
            "--passwd-entry", f"{user.name}:*:{user.uid}:{user.gid}:{user.name}:{user.home}:{user.shell}",
            "--mount", f"type=bind,source={PAUSE},destination={PAUSE_IN_CONTAINER},ro=true",
            "--entrypoint", PAUSE_IN_CONTAINER]
    for m in mounts:
        argv += ["--mount", f"type=bind,source={m.source},destination={m.target}" + (",ro=true" if m.readonly else "")]
    for dev in _devices():
        argv += ["--device", dev]
    return [*argv, image, "-P"]


def _holder_pid(cname: str) -> int | None:
    r = podman("inspect", "--format", "{{.State.Running}} {{.State.Pid}}", cname)
    if r.returncode != 0:
        return None
    running, _, pid = r.stdout.strip().partition(" ")
    return int(pid) if running == "true" and pid.isdigit() and int(pid) > 0 else None


def start(args: argparse.Namespace) -> list[str]:
    """The ``start`` subcommand; returns its output lines."""
    user = User(args.uid, args.gid)
    mounts = parse_mounts(args.mounts) if args.mounts else []
    if args.mount_home and user.home not in ("", "/") and all(m.target != user.home for m in mounts):
        mounts.append(Mount(user.home, user.home))
    keep = parse_env_names(args.env) if args.env else []
    name = check_container_name(args.name) if args.name else ""
    if args.workdir and not args.workdir.startswith("/"):
        raise SpecError(f"--container-workdir: {args.workdir!r} is not an absolute path")
    ref = parse_image(args.image)
    check_sources(mounts, user)
    if args.bind_ro:  # the batch script's directory (slurmd's spool): the plugin's, not the user's, spec
        mounts.append(Mount(args.bind_ro, args.bind_ro, readonly=True))
    image = ensure_image(ref, user)
    cname = container_name(args.job, args.step, name)
    pid = _holder_pid(cname) if name else None
    if pid is None and name and podman("start", cname).returncode == 0:
        pid = _holder_pid(cname)  # a named container of the job, stopped with its step: its files are kept
    if pid is None:
        podman("rm", "--force", "--time", "0", cname)  # a stopped one of the same name (a crashed step)
        _remove_ended(args.job)
        r = podman(*run_argv(cname, args.job, image, user, mounts, bool(name)))
        if r.returncode != 0:
            raise ContainerError(f"starting a container of {args.image} failed: {_last_error(r.stderr)}")
        pid = _holder_pid(cname)
        if pid is None:
            raise ContainerError(f"the container of {args.image} exited at once (podman logs {cname})")
    r = podman("image", "inspect", "--format", "{{json .Config.Env}}\n{{.Config.WorkingDir}}", image)
    env_json, _, workdir = r.stdout.strip().partition("\n") if r.returncode == 0 else ("[]", "", "")
    out = [f"pid {pid}", f"workdir {args.workdir or workdir.strip() or '/'}"]
    out += [f"env {k}={v}" for k, v in image_env(json.loads(env_json or "[]") or [], keep)]
    return out


def _remove_ended(job: str) -> None:
    """The job's earlier unnamed containers: their holders ended with their steps (Slurm kills a step's
    processes; the holder is one), so nothing waits for their removal at a step's end."""
    r = podman("ps", "--all", "--quiet", "--filter", f"label={JOB_LABEL}={job}", "--filter", f"label={NAMED_LABEL}=0",
               "--filter", "status=exited")
    ids = r.stdout.split() if r.returncode == 0 else []
    if ids:
        podman("rm", "--force", "--time", "0", *ids)


def cleanup(job: str) -> None:
    r = podman("ps", "--all", "--quiet", "--filter", f"label={JOB_LABEL}={job}")
    ids = r.stdout.split() if r.returncode == 0 else []
    if ids:
        podman("rm", "--force", "--time", "0", *ids)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="slurmpod-container")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    for opt in ("--job", "--step", "--image"):
        s.add_argument(opt, required=True)
    s.add_argument("--uid", type=int, required=True)
    s.add_argument("--gid", type=int, required=True)
    for opt in ("--mounts", "--workdir", "--name", "--env", "--bind-ro"):
        s.add_argument(opt, default="")
    s.add_argument("--mount-home", action="store_true")
    c = sub.add_parser("cleanup")
    c.add_argument("--job", required=True)
    args = p.parse_args(argv)
    os.environ.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    try:
        if args.cmd == "start":
            print("\n".join(start(args)), flush=True)
        else:
            cleanup(args.job)
    except (ContainerError, SpecError) as exc:
        print(f"slurmpod-container: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


