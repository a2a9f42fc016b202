"""Running host commands (``ip``, ``sysctl`` ...) with argv lists and a timeout."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from slurmpod.providers.base import TemporaryProviderError


class CommandFailed(TemporaryProviderError):
    """A host command needed by the local provider exited non-zero."""


def host_run(argv: Sequence[str], *, timeout: float = 30.0, check: bool = True,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``argv`` on the host and returns the completed process (text mode, output captured)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)
    except subprocess.TimeoutExpired as exc:
        raise TemporaryProviderError(f"timed out after {timeout}s: {' '.join(argv)}") from exc
    except FileNotFoundError as exc:
        raise TemporaryProviderError(f"command not found: {argv[0]}") from exc
    if check and proc.returncode != 0:
        raise CommandFailed(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc
