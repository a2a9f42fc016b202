"""Helpers every ``slurmpod`` command shares: option values and the one-line error exit."""

from __future__ import annotations

import os
import sys
from typing import Any


def parse_capacity(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise SystemExit(f"slurmpod: bad capacity entry {part!r}; use TYPE=COUNT[,TYPE=COUNT]") from None
    return out


def die(message: str) -> int:
    print(f"slurmpod: {message}", file=sys.stderr)
    return 2


def default_region(store: Any | None = None) -> str:
    """The region a tool works in when given none: ``$SLURMPOD_REGION``, else the server's ``--region`` (recorded
    in the database by the server), else us-east-1."""
    from slurmpod.regions import DEFAULT_REGION, REGION_SETTING

    env = os.environ.get("SLURMPOD_REGION")
    if env:
        return env
    stored = store.get_setting(REGION_SETTING) if store is not None else None
    return stored if isinstance(stored, str) and stored else DEFAULT_REGION


def find_clusters(store: Any, wanted: str, region: str | None, account: str | None = None) -> list[Any]:
    """The clusters ``wanted`` names: an ARN or cluster id anywhere, a name in ``region`` (default:
    ``default_region``) and, when given, ``account`` (names are unique per account and region only)."""
    region = region or default_region(store)
    out = []
    for c in store.list_clusters():
        if wanted in (c.arn, c.cluster_id) or (
                c.name == wanted and c.region == region and account in (None, c.account_id)):
            out.append(c)
    return out


def one_cluster(store: Any, wanted: str, region: str | None, account: str | None = None) -> Any:
    """The one cluster ``wanted`` names, or a ``LookupError`` with what to give instead."""
    recs = find_clusters(store, wanted, region, account)
    if not recs:
        raise LookupError(f"no cluster {wanted} in region {region or default_region(store)} "
                          "(give --region, the ARN or the cluster id)")
    if len(recs) > 1:
        raise LookupError(f"{wanted} names clusters of several accounts ({', '.join(c.account_id for c in recs)}): "
                          "give the ARN or the cluster id")
    return recs[0]
