"""``slurmpod events CLUSTER``: print (and optionally follow) a cluster's events through the API.

It talks to the server with boto3 (ListClusterEvents), so it works against remote servers too. Lines look
like ``TIME LEVEL RESOURCE [group] [instance] DESCRIPTION``, oldest first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
POLL_SECONDS = 1.0
# --follow re-reads this many seconds before the newest event seen (events are stamped when created but
# may commit a little later) and drops the ones it already printed.
FOLLOW_OVERLAP = 5.0
PAGE = 100


class EventsError(Exception):
    """A user-facing, one-line failure."""


def add_events_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds the ``events`` subcommand to ``sub`` (an argparse subparsers object)."""
    p: argparse.ArgumentParser = sub.add_parser("events", help="show (and follow) a cluster's events")
    p.add_argument("cluster", help="cluster name or ARN")
    p.add_argument("--endpoint-url", default=os.environ.get("SLURMPOD_ENDPOINT_URL", DEFAULT_ENDPOINT),
                   help=f"slurmpod API endpoint (default: {DEFAULT_ENDPOINT})")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until Ctrl-C")
    p.add_argument("--group", help="only events of this instance group")
    p.add_argument("--node", help="only events of this instance id")
    p.add_argument("--limit", type=_positive_int, help="only the newest N events")
    p.set_defaults(func=run_events)
    return p


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# ---- formatting ------------------------------------------------------------------------------------


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def format_time(value: Any) -> str:
    """UTC, millisecond precision: ``2025-01-31T12:00:00.123Z``."""
    dt = datetime.fromtimestamp(_epoch(value), UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def format_event(e: Mapping[str, Any]) -> str:
    """One output line for a ``ClusterEventSummary``."""
    parts = [format_time(e["EventTime"]), f"{e.get('EventLevel', '-'):<5}", f"{e['ResourceType']:<13}"]
    for key in ("InstanceGroupName", "InstanceId"):
        if e.get(key):
            parts.append(str(e[key]))
    parts.append(str(e.get("Description", "")))
    return " ".join(parts)


# ---- API access -------------------------------------------------------------------------------------


def make_client(endpoint_url: str, region: str | None = None) -> Any:
    """A SageMaker client for ``endpoint_url`` in ``region`` (else the AWS configuration's, else
    ``$SLURMPOD_REGION``, else us-east-1; placeholder credentials when none are configured)."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    kwargs: dict[str, Any] = {}
    if session.get_credentials() is None:
        kwargs = {"aws_access_key_id": "slurmpod", "aws_secret_access_key": "slurmpod"}
    return session.client(
        "sagemaker",
        endpoint_url=endpoint_url,
        region_name=region or session.region_name or os.environ.get("SLURMPOD_REGION") or "us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30),
        **kwargs,
    )


def iter_events(client: Any, cluster: str, *, descending: bool, group: str | None = None,
                node: str | None = None, after: float | None = None) -> Iterator[dict[str, Any]]:
    """Every matching event, page by page (ListClusterEvents)."""
    req: dict[str, Any] = {"ClusterName": cluster, "SortOrder": "Descending" if descending else "Ascending",
                           "MaxResults": PAGE}
    if group:
        req["InstanceGroupName"] = group
    if node:
        req["NodeId"] = node
    if after is not None:
        req["EventTimeAfter"] = datetime.fromtimestamp(after, UTC)
    while True:
        resp = _call(client, cluster, req)
        yield from resp.get("Events", [])
        token = resp.get("NextToken")
        if not token:
            return
        req["NextToken"] = token


def _call(client: Any, cluster: str, req: dict[str, Any]) -> dict[str, Any]:
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionClosedError,
        EndpointConnectionError,
        ParamValidationError,
        ReadTimeoutError,
    )

    endpoint = client.meta.endpoint_url
    try:
        return dict(client.list_cluster_events(**req))
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code, message = err.get("Code", "Error"), err.get("Message", str(exc))
        if code == "ResourceNotFound":
            raise EventsError(f"cluster {cluster} not found at {endpoint}") from None
        raise EventsError(f"{code}: {message}") from None
    except (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError):
        raise EventsError(f"cannot reach the slurmpod API at {endpoint} (is `slurmpod server` running?)") from None
    except ParamValidationError as exc:
        raise EventsError(f"invalid argument: {' '.join(str(exc).split())}") from None
    except BotoCoreError as exc:
        raise EventsError(f"request to {endpoint} failed: {exc}") from None


# ---- the command ----------------------------------------------------------------------------------------


class _Seen:
    """Event ids already printed, keyed by time so old ones can be forgotten."""

    def __init__(self) -> None:
        self._ids: dict[str, float] = {}
        self.newest: float | None = None

    def add(self, e: Mapping[str, Any]) -> bool:
        """Records ``e``; False when it was seen before."""
        eid = str(e["EventId"])
        if eid in self._ids:
            return False
        t = _epoch(e["EventTime"])
        self._ids[eid] = t
        self.newest = t if self.newest is None else max(self.newest, t)
        return True

    def forget_before(self, t: float) -> None:
        self._ids = {k: v for k, v in self._ids.items() if v >= t}


def show_events(client: Any, cluster: str, *, out: TextIO, group: str | None = None, node: str | None = None,
                limit: int | None = None, follow: bool = False, poll: float = POLL_SECONDS,
                max_polls: int | None = None) -> None:
    """Prints the (newest ``limit``) events oldest-first; with ``follow``, polls for new ones forever
    (or ``max_polls`` times)."""
    seen = _Seen()
    printed: list[dict[str, Any]] = []
    cutoff: float | None = None
    for e in iter_events(client, cluster, descending=True, group=group, node=node):
        t = _epoch(e["EventTime"])
        if limit is None or len(printed) < limit:
            printed.append(e)
            seen.add(e)
            if limit is not None and len(printed) == limit:
                cutoff = (seen.newest or t) - FOLLOW_OVERLAP - 2
                if not follow:
                    break
            continue
        # past the limit: remember what --follow's overlap window would show again, then stop
        if cutoff is not None and t < cutoff:
            break
        seen.add(e)
    for e in reversed(printed):
        out.write(format_event(e) + "\n")
    out.flush()
    if not follow:
        return
    if seen.newest is None:
        seen.newest = time.time() - FOLLOW_OVERLAP
    polls = 0
    while max_polls is None or polls < max_polls:
        time.sleep(poll)
        polls += 1
        after = (seen.newest or time.time()) - FOLLOW_OVERLAP
        fresh = [e for e in iter_events(client, cluster, descending=False, group=group, node=node, after=after)
                 if seen.add(e)]
        for e in sorted(fresh, key=lambda x: _epoch(x["EventTime"])):
            out.write(format_event(e) + "\n")
        out.flush()
        seen.forget_before(after - FOLLOW_OVERLAP - 2)


def run_events(args: argparse.Namespace) -> int:
    """Entry point of ``slurmpod events``; returns the exit status."""
    try:
        try:
            client = make_client(args.endpoint_url, getattr(args, "region", None))
        except ValueError as exc:
            raise EventsError(f"bad --endpoint-url {args.endpoint_url!r}: {exc}") from None
        show_events(client, args.cluster, out=sys.stdout, group=args.group, node=args.node, limit=args.limit,
                    follow=args.follow)
    except EventsError as exc:
        print(f"slurmpod: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return 0
