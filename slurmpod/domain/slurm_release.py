"""Slurm releases and SchedMD's upgrade rules (pure).

A Slurm *major release* is ``YY.MM`` (22.05, 23.02, 23.11, 24.05, 24.11, 25.05, 25.11, ...); a package version
such as ``24.11.5-4+deb13u1`` belongs to major 24.11. SchedMD's rules for upgrading a cluster
(https://slurm.schedmd.com/upgrades.html): slurmdbd first, then the slurmctlds, then slurmd and the clients;
a daemon may be at most two major releases older than the one it talks to -- three when the newer one is 24.11 or
later ("With the change to a 6-month cycle in 2024, Slurm 24.11 introduced compatibility with the previous three
major releases") -- so an upgrade may jump at most that many releases (22.05 -> 23.11 is fine, 22.05 -> 24.11 is
four releases and is refused, 24.11 -> 26.05 is three and is permitted), and there is no downgrade of a daemon's
saved state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: every major release since 20.02, in order (from 2024 on SchedMD releases in May and November)
KNOWN_MAJORS: tuple[tuple[int, int], ...] = (
    (20, 2), (20, 11), (21, 8), (22, 5), (23, 2), (23, 11), (24, 5), (24, 11), (25, 5), (25, 11), (26, 5),
)
#: how many major releases an upgrade may jump (to a release before ``WIDE_WINDOW_FROM``)
MAX_JUMP = 2
#: ... and to ``WIDE_WINDOW_FROM`` or later: 24.11 accepts the previous three majors
MAX_JUMP_WIDE = 3
WIDE_WINDOW_FROM = (24, 11)

_VERSION = re.compile(r"^\s*(\d{2})\.(\d{1,2})(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class SlurmRelease:
    """A major release: ``SlurmRelease(24, 11)``, shown as ``24.11``."""

    year: int
    month: int

    def __str__(self) -> str:
        return f"{self.year:02d}.{self.month:02d}"


def major_of(version: str) -> SlurmRelease | None:
    """The major release of a package or Slurm version string (None when it is not one, e.g. empty)."""
    m = _VERSION.match(version or "")
    return SlurmRelease(int(m.group(1)), int(m.group(2))) if m else None


def _index(rel: SlurmRelease) -> int:
    """Position in the release sequence; releases after the known ones follow SchedMD's May/November cadence."""
    key = (rel.year, rel.month)
    if key in KNOWN_MAJORS:
        return KNOWN_MAJORS.index(key)
    last_year, _ = KNOWN_MAJORS[-1]
    if rel.year > last_year:
        return len(KNOWN_MAJORS) - 1 + 2 * (rel.year - last_year) - (1 if rel.month <= 5 else 0)
    # an unknown release between known ones: counts as the next known one
    return next((i for i, k in enumerate(KNOWN_MAJORS) if k >= key), len(KNOWN_MAJORS))


def releases_between(old: SlurmRelease, new: SlurmRelease) -> int:
    """How many major releases ``new`` is after ``old`` (negative: older)."""
    return _index(new) - _index(old)


def max_jump(newer: SlurmRelease) -> int:
    """How many major releases older a daemon or client may be than ``newer`` (the release it talks to, or the
    release of an upgrade): 3 from 24.11 on, 2 before."""
    return MAX_JUMP_WIDE if (newer.year, newer.month) >= WIDE_WINDOW_FROM else MAX_JUMP


def upgrade_problem(current: str, target: str) -> str | None:
    """Why nodes on Slurm ``current`` may not move to Slurm ``target`` (versions as the images record them);
    None when they may (same major release, an upgrade within ``max_jump(target)`` releases, or a version
    unknown)."""
    old, new = major_of(current), major_of(target)
    if old is None or new is None or old == new:
        return None
    jump = releases_between(old, new)
    if jump < 0:
        return (f"Slurm {new} is older than the Slurm {old} the nodes run: Slurm cannot be downgraded (its saved "
                "state and accounting database are converted on upgrade).")
    limit = max_jump(new)
    if jump > limit:
        return (f"Slurm {old} -> {new} is {jump} major releases; Slurm {new} upgrades at most {limit} major releases "
                f"at a time (update to an image with an intermediate release first).")
    return None


def is_major_upgrade(current: str, target: str) -> bool:
    """``target`` is a later major release than ``current`` (the daemons must then go slurmdbd, slurmctld,
    slurmd, in that order)."""
    old, new = major_of(current), major_of(target)
    return old is not None and new is not None and new > old


def mix_problem(controller: str, worker: str) -> str | None:
    """Why slurmd/clients on Slurm ``worker`` cannot work with slurmctld on Slurm ``controller`` (None when they
    can: the same release, or a worker at most ``max_jump(controller)`` releases older)."""
    ctl, wrk = major_of(controller), major_of(worker)
    if ctl is None or wrk is None or ctl == wrk:
        return None
    behind = releases_between(wrk, ctl)
    if behind < 0:
        return f"Slurm {wrk} is newer than the controllers' Slurm {ctl} (slurmd may not be newer than slurmctld)"
    if behind > max_jump(ctl):
        return f"Slurm {wrk} is more than {max_jump(ctl)} major releases older than the controllers' Slurm {ctl}"
    return None


def primary_reclaim_blocks_clients(version: str) -> bool:
    """Whether a primary slurmctld that starts while a backup is in control leaves clients hanging.

    Slurm 24.11's slurmctld listens on its port from the start, then asks the backup in control to hand over
    (REQUEST_CONTROL) and waits for its answer, which came only after the 30 s CONTROL_TIMEOUT here: every client
    RPC sent to the primary meanwhile is accepted and times out (squeue: "Socket timed out on send/recv
    operation"). 22.05's slurmctld opens its port only once it is in control (clients go on to the backup). The
    releases between were not tried: they count as 24.11's (the careful way works on any release)."""
    rel = major_of(version)
    return rel is not None and rel > SlurmRelease(22, 5)
