"""The ``slurmpod`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from slurmpod.settings import Settings, default_state_dir


def _parse_capacity(text: str | None) -> dict[str, int]:
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


def _die(message: str) -> int:
    print(f"slurmpod: {message}", file=sys.stderr)
    return 2


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
    import socket

    import uvicorn

    from slurmpod.providers.base import SetupError
    from slurmpod.server import build_server

    settings = Settings(
        state_dir=Path(args.state_dir),
        db_url=args.db,
        host=args.host,
        port=args.port,
        provider=args.provider,
        compat=args.compat,
        region=args.region,
        account_id=args.account_id,
        auth=args.auth,
        simulated_capacity=_parse_capacity(args.simulated_capacity),
        simulated_launch_delay=args.simulated_launch_delay,
        simulated_seed=args.simulated_seed,
        simulated_fail_rate=args.simulated_fail_rate,
        local_cidr=args.local_cidr,
        accounting=args.accounting,
        reconcile_interval=args.reconcile_interval,
        s3_endpoint_url=args.s3_endpoint_url,
        lifecycle_file_roots=tuple(args.lifecycle_file_root or ()),
        min_count_timeout=args.min_count_timeout,
        retry_delay=args.retry_delay,
        update_drain_timeout=args.update_drain_timeout,
        capacity=_parse_capacity(args.capacity),
    )
    if bool(args.tls_cert) != bool(args.tls_key):
        return _die("--tls-cert and --tls-key go together")
    refusal = listen_refusal(args.host, tls=bool(args.tls_cert), insecure_no_tls=args.insecure_no_tls, auth=args.auth)
    if refusal:
        return _die(refusal)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.insecure_no_tls and not args.tls_cert and not _is_loopback(args.host):
        logging.getLogger("slurmpod").warning("listening on %s WITHOUT TLS (--insecure-no-tls)", args.host)
    with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            return _die(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; pick another --port")
    try:
        server = build_server(settings)
    except SetupError as exc:
        return _die(str(exc))
    if settings.provider == "simulated":
        logging.getLogger("slurmpod").warning("provider: SIMULATED (no real nodes; for tests and benchmarks)")
    server.start()
    try:
        uvicorn.run(server.app, host=args.host, port=args.port, log_level="warning", access_log=False,
                    ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key)
    finally:
        server.stop()
    return 0


def cmd_credentials(args: argparse.Namespace) -> int:
    import json

    from slurmpod.credentials import CredentialError, CredentialStore

    store = CredentialStore(Path(args.state_dir))
    try:
        if args.credentials_command == "create":
            print(json.dumps(store.create(args.account).as_create_access_key(), indent=4))
        elif args.credentials_command == "delete":
            store.delete(args.access_key_id)
            print(f"deleted {args.access_key_id}")
        else:
            print(json.dumps([c.summary() for c in store.list()], indent=4))
    except CredentialError as exc:
        return _die(str(exc))
    return 0


def cmd_secrets(args: argparse.Namespace) -> int:
    import json

    from slurmpod.secretstore import SecretError, SecretStore

    store = SecretStore(Path(args.state_dir))
    try:
        if args.secrets_command == "create":
            try:
                value = sys.stdin.read() if args.from_file == "-" else Path(args.from_file).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                return _die(f"cannot read {args.from_file}: {exc}")
            secret = store.create(args.name, value.strip(), args.account, args.region)
            print(json.dumps({"ARN": secret.arn, "Name": secret.name}, indent=4))
        elif args.secrets_command == "delete":
            gone = store.delete(args.name, args.account)
            print(f"deleted {gone.arn}")
        else:
            print(json.dumps([s.summary() for s in store.list(args.account)], indent=4))
    except SecretError as exc:
        return _die(str(exc))
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from slurmpod.providers.local.cleanup import cleanup, find_leftovers

    state = Path(args.state_dir)
    if args.check:
        left = find_leftovers(state)
        for item in left:
            print(item)
        print(f"{len(left)} leftover(s)" if left else "no leftovers")
        return 1 if left else 0
    removed = cleanup(state)
    for item in removed:
        print(f"removed {item}")
    print(f"{len(removed)} item(s) removed")
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    import time

    from slurmpod.lifecycle.images import END_OF_LIFE, SECURITY_UPDATE_REQUIRED, ImageCatalog, ImageError
    from slurmpod.store.sql import SqlStore

    store = SqlStore(Settings(state_dir=Path(args.state_dir), db_url=args.db).database_url)
    try:
        catalog = ImageCatalog(store)
        if args.images_command == "publish":
            script = Path(args.script).read_text() if args.script else ""
            image = catalog.publish(base=args.base, script=script, description=args.description or "",
                                    now=time.time(), release=args.release)
            print(f"published {image.image_id} release {image.release}")
            return 0
        if args.images_command == "mark":
            status = SECURITY_UPDATE_REQUIRED if args.security_update_required else END_OF_LIFE
            image = catalog.mark(args.image_id, status)
            print(f"{image.image_id} ({image.release}) marked {status}")
            return 0
        images = catalog.releases()
    except (ImageError, OSError) as exc:
        return _die(str(exc))
    finally:
        store.close()
    latest = images[-1].image_id
    print(f"{'IMAGE ID':<24} {'RELEASE':<10} {'STATUS':<24} DESCRIPTION")
    for i in images:
        tag = " (default, latest)" if i.image_id == latest else ""
        print(f"{i.image_id:<24} {i.release:<10} {i.status:<24} {i.description}{tag}")
    return 0


def cmd_connect(args: argparse.Namespace) -> int:
    from slurmpod.connect import ConnectError, connect

    settings = Settings(state_dir=Path(args.state_dir), db_url=args.db)
    command = list(args.command_argv or [])
    try:
        return connect(settings.state_dir, settings.database_url, args.target, args.cluster, args.group, command)
    except ConnectError as exc:
        return _die(str(exc))


def cmd_demo(args: argparse.Namespace) -> int:
    from slurmpod.demo import run_demo, run_down

    state = Path(args.state_dir)
    return run_down(state, args.port) if args.down else run_demo(state, args.port)


def cmd_capacity(args: argparse.Namespace) -> int:
    from slurmpod.reconciler.loop import CAPACITY_KEY
    from slurmpod.store.sql import SqlStore

    store = SqlStore(Settings(state_dir=Path(args.state_dir), db_url=args.db).database_url)
    try:
        table = dict(store.get_setting(CAPACITY_KEY) or {})
        if args.capacity_command == "set":
            for entry in args.entries:
                table.update(_parse_capacity(entry))
            store.put_setting(CAPACITY_KEY, table)
        elif args.capacity_command == "unset":
            for name in args.types:
                table.pop(name, None)
            store.put_setting(CAPACITY_KEY, table)
    finally:
        store.close()
    if not table:
        print("capacity: unlimited for every instance type")
    for name in sorted(table):
        print(f"{name}={table[name]}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from slurmpod.clock import SystemClock
    from slurmpod.errors import ServiceError
    from slurmpod.service.clusters import Caller, ClusterService
    from slurmpod.store.sql import SqlStore

    settings = Settings(state_dir=Path(args.state_dir), db_url=args.db)
    store = SqlStore(settings.database_url)
    try:
        svc = ClusterService(store, SystemClock(), provider_name="-")
        rec = svc.migrate(Caller(args.account_id, args.region), args.cluster)
    except ServiceError as exc:
        return _die(exc.message)
    finally:
        store.close()
    print(f"cluster {rec.name} now uses API-driven SlurmConfig (DescribeCluster shows each group's NodeType "
          "and PartitionNames; UpdateCluster manages them from now on)")
    return 0


def cmd_webhooks(args: argparse.Namespace) -> int:
    from slurmpod.notify import SETTING_KEY
    from slurmpod.store.sql import SqlStore

    store = SqlStore(Settings(state_dir=Path(args.state_dir), db_url=args.db).database_url)
    try:
        recs = [c for c in store.list_clusters() if args.cluster in (c.name, c.arn, c.cluster_id)]
        if not recs:
            return _die(f"no cluster {args.cluster}")
        cid = recs[0].cluster_id
        table = {k: list(v) for k, v in (store.get_setting(SETTING_KEY) or {}).items()}
        urls = table.setdefault(cid, [])
        if args.webhooks_command == "add":
            if not args.url.startswith(("http://", "https://")):
                return _die("a webhook URL starts with http:// or https://")
            if args.url not in urls:
                urls.append(args.url)
        elif args.webhooks_command == "remove":
            table[cid] = [u for u in urls if u != args.url]
        if args.webhooks_command != "list":
            store.put_setting(SETTING_KEY, table)
        for url in table.get(cid, []):
            print(url)
    finally:
        store.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmpod", description="Real Slurm clusters behind a HyperPod-compatible API"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("server", help="run the API server and the reconciler")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--db", default=None, help="database URL (default: SQLite under --state-dir)")
    s.add_argument("--provider", choices=["local", "simulated"], default="local")
    s.add_argument("--compat", choices=["extended", "strict"], default="extended")
    s.add_argument("--state-dir", default=str(default_state_dir()))
    s.add_argument("--region", default=os.environ.get("SLURMPOD_REGION", "us-east-1"))
    s.add_argument("--account-id", default=os.environ.get("SLURMPOD_ACCOUNT_ID", "123456789012"))
    s.add_argument("--simulated-capacity", default="", help="TYPE=COUNT[,...] (simulated provider)")
    s.add_argument("--simulated-launch-delay", type=float, default=0.05)
    s.add_argument("--simulated-seed", type=int, default=0)
    s.add_argument("--simulated-fail-rate", type=float, default=0.0)
    s.add_argument("--local-cidr", default="10.231.0.0/16", help="address pool for local instances")
    s.add_argument("--accounting", choices=["local", "none"], default="local",
                   help="clusters without Orchestrator.Slurm.AccountingDatabase get: local (default) slurmdbd + "
                        "MariaDB on a per-cluster service host (sacct works); none: no accounting")
    s.add_argument("--reconcile-interval", type=float, default=2.0)
    s.add_argument("--capacity", default="", help="initial capacity table TYPE=COUNT[,...] (see `capacity set`)")
    s.add_argument("--min-count-timeout", type=float, default=3 * 3600.0,
                   help="seconds a Continuous group may stay below MinCount before it rolls back (default 3 h)")
    s.add_argument("--retry-delay", type=float, default=2.0, help="first backoff step of launch retries (s)")
    s.add_argument("--update-drain-timeout", type=float, default=3600.0,
                   help="software updates wait this long (s) for a drained node's jobs before replacing it")
    s.add_argument("--lifecycle-file-root", action="append", metavar="DIR",
                   help="allow file:// lifecycle sources only under DIR (repeatable; default: anywhere outside "
                        "the state dir)")
    s.add_argument("--s3-endpoint-url", default=os.environ.get("SLURMPOD_S3_ENDPOINT_URL"),
                   help="S3-compatible endpoint for s3:// lifecycle sources (e.g. MinIO)")
    s.add_argument("--auth", choices=["sigv4", "none"], default="sigv4",
                   help="sigv4 (default): every request signed with a key from `slurmpod credentials create`; "
                        "none: no authentication, everyone acts as --account-id (loopback only)")
    s.add_argument("--tls-cert", default=None, help="PEM certificate: serve HTTPS (required off loopback)")
    s.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    s.add_argument("--insecure-no-tls", action="store_true",
                   help="allow plain HTTP on a non-loopback --host (not recommended)")
    s.set_defaults(func=cmd_server)

    cr = sub.add_parser("credentials", help="access keys for the API (SigV4), each acting as one account")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--state-dir", default=str(default_state_dir()),
                       help="keys live in <state-dir>/auth/credentials.json (0600)")
    where.add_argument("--db", default=None, help="accepted for symmetry; keys are not stored in the database")
    crsub = cr.add_subparsers(dest="credentials_command", required=True)
    crc = crsub.add_parser("create", parents=[where],
                           help="new access key; prints IAM CreateAccessKey-shaped JSON (the only time the secret "
                                "is shown)")
    crc.add_argument("--account", default=os.environ.get("SLURMPOD_ACCOUNT_ID", "123456789012"),
                     help="12-digit account id the key acts as (default 123456789012)")
    crsub.add_parser("list", parents=[where], help="access keys and their accounts (no secrets)")
    crd = crsub.add_parser("delete", parents=[where], help="revoke an access key (takes effect on the next request)")
    crd.add_argument("access_key_id")
    cr.set_defaults(func=cmd_credentials)

    se = sub.add_parser("secrets", help="secrets (Secrets Manager equivalent), e.g. AccountingDatabase.SecretArn")
    swhere = argparse.ArgumentParser(add_help=False)
    swhere.add_argument("--state-dir", default=str(default_state_dir()),
                        help="secrets live in <state-dir>/secrets/<account>/ (0600 files)")
    swhere.add_argument("--account", default=os.environ.get("SLURMPOD_ACCOUNT_ID", "123456789012"),
                        help="12-digit account id that owns the secret (default 123456789012)")
    sesub = se.add_subparsers(dest="secrets_command", required=True)
    sec = sesub.add_parser("create", parents=[swhere], help="store a secret; prints its ARN (never the value)")
    sec.add_argument("name")
    sec.add_argument("--from-file", required=True, metavar="FILE",
                     help='the value ("-" = stdin); for a database: {"username": "...", "password": "..."}')
    sec.add_argument("--region", default=os.environ.get("SLURMPOD_REGION", "us-east-1"),
                     help="region written into the ARN (default us-east-1; use the server's --region)")
    sesub.add_parser("list", parents=[swhere], help="ARNs and names (no values)")
    sed = sesub.add_parser("delete", parents=[swhere], help="delete a secret (name or ARN)")
    sed.add_argument("name")
    se.set_defaults(func=cmd_secrets)

    c = sub.add_parser("cleanup", help="remove what a crashed server or test left behind")
    c.add_argument("--state-dir", default=str(default_state_dir()))
    c.add_argument("--check", action="store_true", help="only report leftovers; exit 1 if any")
    c.set_defaults(func=cmd_cleanup)

    k = sub.add_parser("connect", help="a root shell (or one command after --) inside a node")
    k.add_argument("target", nargs="?", help="sagemaker-cluster:<cluster-id>_<group>-<instance-id>")
    k.add_argument("--cluster", help="cluster name or ARN (instead of a target)")
    k.add_argument("--group", help="instance group (with --cluster); default: a controller")
    k.add_argument("--state-dir", default=str(default_state_dir()))
    k.add_argument("--db", default=None)
    k.set_defaults(command_argv=[])
    k.set_defaults(func=cmd_connect)

    cap = sub.add_parser("capacity", help="the capacity table (reproduce shortages; the server applies changes live)")
    cap.add_argument("--state-dir", default=str(default_state_dir()))
    cap.add_argument("--db", default=None)
    capsub = cap.add_subparsers(dest="capacity_command", required=True)
    cs = capsub.add_parser("set", help="TYPE=COUNT ... (max live instances of that type)")
    cs.add_argument("entries", nargs="+")
    cu = capsub.add_parser("unset", help="TYPE ... (back to unlimited)")
    cu.add_argument("types", nargs="+")
    capsub.add_parser("show")
    cap.set_defaults(func=cmd_capacity)

    m = sub.add_parser("migrate", help="convert a legacy (provisioning_parameters.json) cluster to SlurmConfig")
    m.add_argument("cluster", help="cluster name or ARN")
    m.add_argument("--state-dir", default=str(default_state_dir()))
    m.add_argument("--db", default=None)
    m.add_argument("--region", default=os.environ.get("SLURMPOD_REGION", "us-east-1"))
    m.add_argument("--account-id", default=os.environ.get("SLURMPOD_ACCOUNT_ID", "123456789012"))
    m.set_defaults(func=cmd_migrate)

    w = sub.add_parser("webhooks", help="notification URLs of a cluster (controller failover etc.; SNS-like JSON)")
    w.add_argument("--state-dir", default=str(default_state_dir()))
    w.add_argument("--db", default=None)
    wsub = w.add_subparsers(dest="webhooks_command", required=True)
    for verb in ("add", "remove"):
        wp = wsub.add_parser(verb)
        wp.add_argument("cluster")
        wp.add_argument("url")
    wl = wsub.add_parser("list")
    wl.add_argument("cluster")
    w.set_defaults(func=cmd_webhooks)

    d = sub.add_parser("demo", help="seed 000's cluster on real Slurm here, and a job on it")
    d.add_argument("--state-dir", default=str(default_state_dir()))
    d.add_argument("--port", type=int, default=8080)
    d.add_argument("--down", action="store_true", help="delete the demo cluster and stop its server")
    d.set_defaults(func=cmd_demo)

    from slurmpod.events_cli import add_events_parser

    add_events_parser(sub)

    from slurmpod.hosts_cli import add_hosts_parser

    add_hosts_parser(sub)

    i = sub.add_parser("images", help="image releases (AMIs): list, publish, mark")
    i.add_argument("--state-dir", default=str(default_state_dir()))
    i.add_argument("--db", default=None)
    isub = i.add_subparsers(dest="images_command", required=True)
    il = isub.add_parser("list", help="list image releases")
    ip = isub.add_parser("publish", help="publish a new release whose baseline runs an extra setup step")
    ip.add_argument("--from", dest="base", default=None, help="base release (default: latest)")
    ip.add_argument("--script", default=None, help="bash file run as root in every node of the release")
    ip.add_argument("--release", default=None, help="release version X.Y.Z (default: next patch)")
    ip.add_argument("--description", default=None)
    ip.set_defaults(func=cmd_images)
    im = isub.add_parser("mark", help="mark a release")
    im.add_argument("image_id")
    flag = im.add_mutually_exclusive_group(required=True)
    flag.add_argument("--security-update-required", action="store_true")
    flag.add_argument("--end-of-life", action="store_true")
    im.set_defaults(func=cmd_images)
    il.set_defaults(func=cmd_images)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    trailing: list[str] = []
    if argv and argv[0] == "connect" and "--" in argv:
        cut = argv.index("--")
        argv, trailing = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if trailing:
        args.command_argv = trailing
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
