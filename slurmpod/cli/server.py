"""``slurmpod server``: the API server (uvicorn on uvloop + httptools) and the reconciler, in one process or (a
PostgreSQL --db) two (``slurmpod.background``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from slurmpod.cli.options import die, parse_capacity
from slurmpod.settings import Settings


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen_refusal(host: str, *, tls: bool, insecure_no_tls: bool, auth: str) -> str | None:
    """Why ``slurmpod server`` must not listen on ``host`` as configured (one line), or None."""
    if _is_loopback(host):
        return None
    if auth == "none":
        return f"refusing --auth none on non-loopback address {host}: it would let anyone on the network in"
    if not tls and not insecure_no_tls:
        return (f"refusing to listen on non-loopback address {host} without TLS: pass --tls-cert FILE --tls-key FILE, "
                "or --insecure-no-tls to accept plaintext (requests readable and replayable on the network)")
    return None


def cmd_server(args: argparse.Namespace) -> int:
    import dataclasses
    import os

    import uvicorn

    from slurmpod.background import BackgroundFailed
    from slurmpod.cli.serving import GRACEFUL_SECONDS, GracefulServer, listening_socket
    from slurmpod.providers.base import SetupError
    from slurmpod.server import build_server

    args.region = args.region or os.environ.get("SLURMPOD_REGION") or "us-east-1"
    settings = Settings(
        state_dir=Path(args.state_dir),
        db_url=args.db,
        host=args.host,
        port=args.port,
        provider=args.provider,
        compat=args.compat,
        region=args.region,
        audit_retention_days=args.audit_retention_days,
        account_id=args.account_id,
        auth=args.auth,
        simulated_capacity=parse_capacity(args.simulated_capacity),
        simulated_launch_delay=args.simulated_launch_delay,
        simulated_seed=args.simulated_seed,
        simulated_fail_rate=args.simulated_fail_rate,
        local_cidr=args.local_cidr,
        accounting=args.accounting,
        node_image=args.node_image,
        reconcile_interval=args.reconcile_interval,
        s3_endpoint_url=args.s3_endpoint_url,
        lifecycle_file_roots=tuple(args.lifecycle_file_root or ()),
        min_count_timeout=args.min_count_timeout,
        retry_delay=args.retry_delay,
        update_drain_timeout=args.update_drain_timeout,
        dhc_busy_timeout=args.deep_health_check_busy_timeout,
        dhc_stress_seconds=args.deep_health_check_stress_seconds,
        capacity=parse_capacity(args.capacity),
        replica_id=args.replica_id,
        machine_id=args.machine_id,
        lease_seconds=args.lease_seconds,
        reconciler=args.reconciler or "thread",
        reconciler_nice=args.reconciler_nice,
    )
    if args.reconciler is None and settings.shared_database:  # the default on PostgreSQL: a process of its own
        settings = dataclasses.replace(settings, reconciler="process")
    from slurmpod.regions import is_region

    if not is_region(args.region):
        return die(f"--region {args.region!r} is not an AWS region name (e.g. us-east-1, ap-northeast-1)")
    if args.audit_retention_days <= 0:
        return die("--audit-retention-days must be a positive number of days")
    if args.lease_seconds < 1:
        return die("--lease-seconds must be at least 1")
    if settings.reconciler == "process" and not settings.shared_database:
        return die("--reconciler process needs a PostgreSQL --db (SQLite: the reconciler runs in the API's process)")
    if not 0 <= args.reconciler_nice <= 19:
        return die(f"--reconciler-nice must be 0-19, not {args.reconciler_nice}")
    if bool(args.tls_cert) != bool(args.tls_key):
        return die("--tls-cert and --tls-key go together")
    refusal = listen_refusal(args.host, tls=bool(args.tls_cert), insecure_no_tls=args.insecure_no_tls, auth=args.auth)
    if refusal:
        return die(refusal)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.insecure_no_tls and not args.tls_cert and not _is_loopback(args.host):
        logging.getLogger("slurmpod").warning("listening on %s WITHOUT TLS (--insecure-no-tls)", args.host)
    if args.reuse_port and not settings.shared_database:
        return die("--reuse-port needs a shared PostgreSQL --db: servers on one SQLite database would each "
                   "reconcile every cluster")
    try:
        sock = listening_socket(args.host, args.port, reuse_port=args.reuse_port)
    except OSError as exc:
        hint = "pick another --port" + ("" if args.reuse_port else ", or --reuse-port to share it with other servers")
        return die(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; {hint}")
    try:
        server = build_server(settings)
    except SetupError as exc:
        sock.close()
        return die(str(exc))
    if settings.provider == "simulated":
        logging.getLogger("slurmpod").warning("provider: SIMULATED (no real nodes; for tests and benchmarks)")
    import signal
    import sys

    # uvicorn re-raises SIGTERM after its graceful shutdown: exit through ``finally`` so the server stops cleanly
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.start()
    except BackgroundFailed as exc:
        server.stop()
        sock.close()
        return die(str(exc))
    # explicit loop/http, so a missing uvloop/httptools wheel fails loudly instead of silently losing ~10 % of
    # requests/s
    config = uvicorn.Config(server.app, log_level="warning", access_log=False, loop="uvloop", http="httptools",
                            ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key,
                            timeout_graceful_shutdown=GRACEFUL_SECONDS)
    try:
        GracefulServer(config, server.hand_over).run(sockets=[sock])
    finally:
        server.stop()
    return 0
