"""Administrative commands on a state directory: credentials, secrets, capacity, webhooks, migrate, cleanup
(images: ``cli/images.py``). Each imports what it needs when it runs, so ``slurmpod --help`` stays fast."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from slurmpod.cli.options import default_region, die, one_cluster, parse_capacity
from slurmpod.regions import is_region
from slurmpod.settings import Settings


def cmd_credentials(args: argparse.Namespace) -> int:
    import json

    from slurmpod.security.credentials import CredentialError, CredentialStore

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
        return die(str(exc))
    return 0


def cmd_secrets(args: argparse.Namespace) -> int:
    import json

    from slurmpod.security.secrets import SecretError, SecretStore

    store = SecretStore(Path(args.state_dir))
    try:
        if args.secrets_command == "create":
            try:
                value = sys.stdin.read() if args.from_file == "-" else Path(args.from_file).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                return die(f"cannot read {args.from_file}: {exc}")
            region = args.region or os.environ.get("SLURMPOD_REGION") or "us-east-1"
            if not is_region(region):
                return die(f"--region {region!r} is not an AWS region name (e.g. us-east-1)")
            secret = store.create(args.name, value.strip(), args.account, region)
            print(json.dumps({"ARN": secret.arn, "Name": secret.name}, indent=4))
        elif args.secrets_command == "delete":
            gone = store.delete(args.name, args.account)
            print(f"deleted {gone.arn}")
        else:
            print(json.dumps([s.summary() for s in store.list(args.account)], indent=4))
    except SecretError as exc:
        return die(str(exc))
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from slurmpod.providers.local.cleanup import cleanup_report, find_leftovers

    state = Path(args.state_dir)
    if args.check:
        left = find_leftovers(state)
        for item in left:
            print(item)
        print(f"{len(left)} leftover(s)" if left else "no leftovers")
        return 1 if left else 0
    report = cleanup_report(state)
    survivors = (": STILL RUNNING after SIGKILL", ": still present after cleanup")
    removed = 0
    for item in report.lines():
        if item.endswith(survivors):
            print(item)
        else:
            print(f"removed {item}")
            removed += 1
    print(f"{removed} item(s) removed")
    if not report.ok:
        print("cleanup incomplete: see the lines above", file=sys.stderr)
        return 1
    return 0


def cmd_capacity(args: argparse.Namespace) -> int:
    from slurmpod.reconciler.loop import CAPACITY_KEY
    from slurmpod.store.sql import SqlStore

    store = SqlStore(Settings(state_dir=Path(args.state_dir), db_url=args.db).database_url)
    try:
        table = dict(store.get_setting(CAPACITY_KEY) or {})
        if args.capacity_command == "set":
            for entry in args.entries:
                table.update(parse_capacity(entry))
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
        rec = svc.migrate(Caller(args.account_id, args.region or default_region(store)), args.cluster)
    except ServiceError as exc:
        return die(exc.message)
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
        try:
            cid = one_cluster(store, args.cluster, args.region).cluster_id
        except LookupError as exc:
            return die(str(exc))
        table = {k: list(v) for k, v in (store.get_setting(SETTING_KEY) or {}).items()}
        urls = table.setdefault(cid, [])
        if args.webhooks_command == "add":
            if not args.url.startswith(("http://", "https://")):
                return die("a webhook URL starts with http:// or https://")
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
