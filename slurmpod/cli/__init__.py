"""The ``slurmpod`` command: ``main()`` and its argparse parser. Each command group lives in its own module
(``server``, ``admin``, ``connect``, ``demo``, ``events``, ``hosts``, ``images``); ``python -m slurmpod.cli``
runs it too."""

from __future__ import annotations

import argparse
import os
import sys

from slurmpod.cli.admin import (
    cmd_capacity,
    cmd_cleanup,
    cmd_credentials,
    cmd_migrate,
    cmd_secrets,
    cmd_webhooks,
)
from slurmpod.cli.audit import add_audit_parser
from slurmpod.cli.common import fill_common, spread_common, version
from slurmpod.cli.connect import cmd_connect
from slurmpod.cli.containers import add_containers_parser
from slurmpod.cli.events import add_events_parser
from slurmpod.cli.faults import add_faults_parser
from slurmpod.cli.hosts import add_hosts_parser
from slurmpod.cli.images import add_images_parser
from slurmpod.cli.logs import add_logs_parser
from slurmpod.cli.options import die
from slurmpod.cli.server import cmd_server, listen_refusal
from slurmpod.settings import default_state_dir

__all__ = ["build_parser", "listen_refusal", "main"]


def cmd_demo(args: argparse.Namespace) -> int:
    try:  # rich (the ``demo`` extra) is imported only when the demo runs
        from slurmpod.cli.demo import cmd_demo as run
    except ModuleNotFoundError as exc:
        if exc.name != "rich":
            raise
        return die("the demo needs rich: pip install 'slurmpod[demo]'")
    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmpod", description="Real Slurm clusters behind a HyperPod-compatible API"
    )
    parser.add_argument("--version", action="version", version=f"slurmpod {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("server", help="run the API server and the reconciler")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--db", default=None, help="database URL (default: SQLite under --state-dir)")
    s.add_argument("--provider", choices=["local", "simulated"], default="local")
    s.add_argument("--compat", choices=["extended", "strict"], default="extended")
    s.add_argument("--state-dir", default=str(default_state_dir()))
    s.add_argument("--region", help="default region: of the console and of the CLI tools (default $SLURMPOD_REGION, "
                                    "else us-east-1); API calls work in the region of their signature")
    s.add_argument("--audit-retention-days", type=float, default=90.0,
                   help="keep the audit trail (CloudTrail LookupEvents, `slurmpod audit`) this long (default 90)")
    s.add_argument("--account-id", default=os.environ.get("SLURMPOD_ACCOUNT_ID", "123456789012"))
    s.add_argument("--simulated-capacity", default="", help="TYPE=COUNT[,...] (simulated provider)")
    s.add_argument("--simulated-launch-delay", type=float, default=0.05)
    s.add_argument("--simulated-seed", type=int, default=0)
    s.add_argument("--simulated-fail-rate", type=float, default=0.0)
    s.add_argument("--local-cidr", default="10.231.0.0/16", help="address pool for local instances")
    s.add_argument("--node-image", default=os.environ.get("SLURMPOD_NODE_IMAGE") or "default",
                   metavar="default|bookworm|trixie|sid|builtin|AMI",
                   help="image of nodes whose instance group names no ImageId (local provider): default: the image "
                        "store's default root filesystem (scripts/install.sh builds it: trixie); bookworm, trixie, "
                        "sid: the store's default image of that Debian suite (Slurm 22.05, 24.11, 26.05); an ami-id "
                        "of the store; builtin: the legacy model whose nodes overlay this host's own / (they can read "
                        "the host); default $SLURMPOD_NODE_IMAGE")
    s.add_argument("--accounting", choices=["local", "none"], default="local",
                   help="clusters without Orchestrator.Slurm.AccountingDatabase get: local (default) slurmdbd + "
                        "MariaDB on a per-cluster service host (sacct works); none: no accounting")
    s.add_argument("--reconcile-interval", type=float, default=2.0)
    s.add_argument("--replica-id", default=None,
                   help="this server's id among several sharing one PostgreSQL --db (default: machine-pid-random)")
    s.add_argument("--lease-seconds", type=float, default=15.0,
                   help="several servers: how long a cluster's lease lasts without renewal; a dead server's clusters "
                        "are taken over this long after it stopped renewing (default 15)")
    s.add_argument("--reuse-port", action="store_true",
                   help="several servers: share --host:--port with the other servers of this machine (SO_REUSEPORT; "
                        "the kernel spreads new connections over them), so one restarting leaves the others serving; "
                        "needs a PostgreSQL --db")
    s.add_argument("--reconciler", choices=["process", "thread"], default=None,
                   help="where the reconciler runs: process (the default with a PostgreSQL --db): a child process at "
                        "a lower CPU priority (--reconciler-nice), so the API answers first on a busy machine; "
                        "thread (the only choice, and the default, on SQLite): threads of the API's process")
    s.add_argument("--reconciler-nice", type=int, default=10, metavar="N",
                   help="--reconciler process: its niceness increment, 0-19 (default 10); what it starts for the "
                        "nodes (their init, the commands and scripts run in them) runs at the host's default priority")
    s.add_argument("--machine-id", default=None,
                   help="several servers: this machine's id for local-node reachability (default /etc/machine-id)")
    s.add_argument("--capacity", default="", help="initial capacity table TYPE=COUNT[,...] (see `capacity set`)")
    s.add_argument("--min-count-timeout", type=float, default=3 * 3600.0,
                   help="seconds a Continuous group may stay below MinCount before it rolls back (default 3 h)")
    s.add_argument("--retry-delay", type=float, default=2.0, help="first backoff step of launch retries (s)")
    s.add_argument("--update-drain-timeout", type=float, default=3600.0,
                   help="software updates wait this long (s) for a drained node's jobs before replacing it")
    s.add_argument("--deep-health-check-busy-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="an on-demand deep health check skips a node whose jobs run longer than this (HyperPod: 600)")
    s.add_argument("--deep-health-check-stress-seconds", type=float, default=5.0, metavar="SECONDS",
                   help="how long InstanceStress runs stress-ng on each node")
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
    sec.add_argument("--region", help="region written into the ARN (default $SLURMPOD_REGION, else us-east-1)")
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
    m.add_argument("--region", help="the cluster's region (default $SLURMPOD_REGION, else the server's --region)")
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

    add_events_parser(sub)
    add_faults_parser(sub)
    add_hosts_parser(sub)

    add_images_parser(sub)
    add_containers_parser(sub)
    add_logs_parser(sub)
    add_audit_parser(sub)
    spread_common(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    trailing: list[str] = []
    if "connect" in argv and "--" in argv[argv.index("connect"):]:
        cut = argv.index("--", argv.index("connect"))
        argv, trailing = argv[:cut], argv[cut + 1 :]
    args = fill_common(build_parser().parse_args(argv))
    if trailing:
        args.command_argv = trailing
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
