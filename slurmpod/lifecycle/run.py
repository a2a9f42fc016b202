"""Run a lifecycle script from a snapshot inside a node, through its ``CommandRunner`` only.

The node may be on another machine (ssh provider), so files travel as a tar stream on stdin
(``tar -x -C <dir>``). The snapshot lands in ``<node_dir>/<hex digest>`` (idempotent: replaced on
each run); the script runs as root with that directory as working directory, a clean environment,
stdout and stderr appended to ``log_path`` inside the node, and a ``timeout`` enforced inside the node
(exit code 124 when it fires). Nothing else in the node is written.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass

from slurmpod.lifecycle.snapshot import Snapshot
from slurmpod.lifecycle.sources import LifecycleSourceError, safe_relpath
from slurmpod.providers.base import CommandRunner

DEFAULT_NODE_DIR = "/opt/slurmpod/lifecycle"
#: where HyperPod nodes keep their lifecycle output (shipped to CloudWatch as LifecycleConfig/<group>/<id>)
DEFAULT_LOG_PATH = "/var/log/provision/provisioning.log"
TAIL_LINES = 20
TIMEOUT_EXIT_CODE = 124
COMMAND_TIMEOUT = 120.0
KILL_GRACE = 30
BASE_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "USER": "root",
    "LOGNAME": "root",
    "LANG": "C.UTF-8",
}

# Runs inside the node as: bash -c WRAPPER slurmpod-lifecycle <dir> <log> <timeout> <label> <tail> cmd...
# Its own stdout (fd 3) carries only the tail of this run's output; the script's output goes to the log.
_WRAPPER = r"""
set -u
dir=$1 log=$2 tmo=$3 label=$4 tail_lines=$5
shift 5
logdir=${log%/*}
[ -z "$logdir" ] || mkdir -p -- "$logdir" || exit 125
exec 3>&1 </dev/null >>"$log" 2>&1 || exit 125
printf '[%s] slurmpod: running %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$label"
off=$(stat -c %s -- "$log")
cd -- "$dir" || exit 125
timeout --kill-after=__GRACE__ "$tmo" "$@" 3>&-
rc=$?
tail -c "+$((off + 1))" -- "$log" | tail -n "$tail_lines" >&3
if [ "$rc" -eq 124 ]; then
  printf '[%s] slurmpod: %s timed out after %s seconds\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$label" "$tmo"
fi
printf '[%s] slurmpod: %s exited with code %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$label" "$rc"
exit "$rc"
""".replace("__GRACE__", str(KILL_GRACE))


class LifecycleRunError(Exception):
    """A node-side step around the script (copy, file write) failed; the script itself did not run."""


@dataclass(frozen=True)
class ScriptResult:
    exit_code: int
    log_tail: str
    digest: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def resolve_entry_point(snapshot: Snapshot, entry_point: str) -> str:
    """The snapshot-relative path of ``entry_point`` (``./x.sh`` → ``x.sh``).

    Raises ``LifecycleSourceError`` if it escapes the snapshot or is not one of its files; callers
    may use this to validate a request as soon as the snapshot is taken.
    """
    try:
        rel = safe_relpath(entry_point)
    except LifecycleSourceError:
        raise LifecycleSourceError(
            f"Lifecycle entry point {entry_point!r} must be a relative path inside the lifecycle source"
        ) from None
    if rel not in snapshot.files:
        raise LifecycleSourceError(
            f"Lifecycle entry point {entry_point!r} was not found in the lifecycle source ({snapshot.digest})"
        )
    return rel


def build_tar(snapshot: Snapshot, extra_files: Mapping[str, bytes] | None = None) -> bytes:
    """An uncompressed tar of the snapshot (root-owned, fixed mtimes) plus ``extra_files`` that the
    snapshot lacks (generated files such as provisioning_parameters.json never override the user's)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in snapshot.files:
            data = (snapshot.path / rel).read_bytes()
            _add(tar, rel, data, 0o755 if snapshot.is_executable(rel) else 0o644)
        for name, data in sorted((extra_files or {}).items()):
            rel = safe_relpath(name)
            if rel not in snapshot.files:
                _add(tar, rel, data, 0o644)
    return buf.getvalue()


def _add(tar: tarfile.TarFile, rel: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(rel)
    info.size = len(data)
    info.mode = mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def _check(runner: CommandRunner, argv: list[str], what: str, *, input: bytes | None = None) -> None:
    result = runner.run(argv, timeout=COMMAND_TIMEOUT, input=input)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()[-500:]
        raise LifecycleRunError(f"{what} failed with exit code {result.returncode}: {detail}")


def _check_abs(path: str, what: str) -> str:
    norm = posixpath.normpath(path)
    if not path.startswith("/") or ".." in path.split("/") or norm == "/":
        raise LifecycleRunError(f"{what} {path!r} must be an absolute path without '..'")
    return norm


def write_node_file(runner: CommandRunner, path: str, content: str | bytes, mode: int = 0o644) -> None:
    """Writes ``content`` to ``path`` inside the node (creating parent directories) with ``mode``."""
    target = _check_abs(path, "Node file path")
    data = content.encode() if isinstance(content, str) else content
    _check(
        runner,
        ["install", "-D", "-m", f"{mode:o}", "/dev/stdin", target],
        f"Writing {target} in the node",
        input=data,
    )


def install_snapshot(
    runner: CommandRunner,
    snapshot: Snapshot,
    *,
    node_dir: str = DEFAULT_NODE_DIR,
    extra_files: Mapping[str, bytes] | None = None,
) -> str:
    """Copies the snapshot into ``<node_dir>/<hex>`` inside the node (replacing any earlier copy);
    returns that directory."""
    base = _check_abs(node_dir, "Lifecycle node directory")
    target = f"{base}/{snapshot.hex}"
    _check(runner, ["rm", "-rf", "--", target], f"Removing {target} in the node")
    _check(runner, ["mkdir", "-p", "--", target], f"Creating {target} in the node")
    _check(
        runner,
        ["tar", "-x", "--no-same-owner", "-f", "-", "-C", target],
        f"Copying the lifecycle scripts to {target}",
        input=build_tar(snapshot, extra_files),
    )
    return target


def _script_argv(snapshot: Snapshot, rel: str) -> list[str]:
    with (snapshot.path / rel).open("rb") as f:
        shebang = f.read(2) == b"#!"
    if shebang and snapshot.is_executable(rel):
        return [f"./{rel}"]
    return ["bash", rel]


def _clean_env(env: Mapping[str, str]) -> list[str]:
    merged = {**BASE_ENV, **env}
    out: list[str] = []
    for key, value in merged.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise LifecycleRunError(f"Invalid environment variable name or value for {key!r}")
        out.append(f"{key}={value}")
    return out


def run_lifecycle_script(
    runner: CommandRunner,
    snapshot: Snapshot,
    entry_point: str,
    *,
    node_dir: str = DEFAULT_NODE_DIR,
    log_path: str = DEFAULT_LOG_PATH,
    timeout: float = 1800,
    env: Mapping[str, str] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
) -> ScriptResult:
    """Copies ``snapshot`` into the node and runs ``entry_point`` there as root; see the module docstring.

    ``env`` is added to a clean root environment (plus ``SLURMPOD_LIFECYCLE_DIR`` and
    ``SLURMPOD_LIFECYCLE_DIGEST``). A non-zero exit is a result, not an exception; raises
    ``LifecycleSourceError`` for a bad entry point, ``LifecycleRunError`` when the copy fails, and the
    runner's ``TemporaryProviderError`` when the node is unreachable.
    """
    rel = resolve_entry_point(snapshot, entry_point)
    log = _check_abs(log_path, "Lifecycle log path")
    workdir = install_snapshot(runner, snapshot, node_dir=node_dir, extra_files=extra_files)
    seconds = max(1, int(timeout))
    env_args = _clean_env(
        {"SLURMPOD_LIFECYCLE_DIR": workdir, "SLURMPOD_LIFECYCLE_DIGEST": snapshot.digest, **(env or {})}
    )
    label = f"{rel} ({snapshot.digest})"
    argv = [
        "env", "-i", *env_args,
        "bash", "-c", _WRAPPER, "slurmpod-lifecycle", workdir, log, str(seconds), label, str(TAIL_LINES),
        *_script_argv(snapshot, rel),
    ]  # fmt: skip
    result = runner.run(argv, timeout=seconds + KILL_GRACE + COMMAND_TIMEOUT)
    tail = result.stdout if result.stdout.strip() else result.stderr
    return ScriptResult(
        exit_code=result.returncode,
        log_tail=_last_lines(tail, TAIL_LINES),
        digest=snapshot.digest,
        timed_out=result.returncode == TIMEOUT_EXIT_CODE,
    )


def _last_lines(text: str, n: int) -> str:
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-n:])


def short_digest(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}…" if len(hexpart) > 12 else digest


def format_failure(
    entry_point: str, result: ScriptResult, *, max_lines: int = 10, max_chars: int = 2000
) -> str:
    """A DescribeCluster/DescribeClusterNode FailureMessage for a failed script, e.g.
    ``Lifecycle script on_create.sh failed with exit code 3 (sha256:abcd…): <last lines>``."""
    what = (
        f"timed out (exit code {result.exit_code})"
        if result.timed_out
        else f"failed with exit code {result.exit_code}"
    )
    head = f"Lifecycle script {entry_point} {what} ({short_digest(result.digest)})"
    lines = [ln for ln in result.log_tail.splitlines() if ln.strip()][-max_lines:]
    if not lines:
        return head + " with no output."
    body = "\n".join(lines)
    room = max_chars - len(head) - 2
    if len(body) > room:
        body = "…" + body[-(room - 1) :]
    return f"{head}: {body}"
