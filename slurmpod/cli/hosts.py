"""``slurmpod hosts add|list|remove``: the host pools of the ``ssh`` provider.

``add`` contacts the host once to pin its SSH host key (printed) before registering it; ``remove`` refuses a
host that runs an instance. The server routes instance types that have a pool to the ssh provider (it
checks for pools when it starts: restart it after adding the first pool).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from slurmpod.providers.base import ProviderError
from slurmpod.providers.ssh.pool import HostPool, HostRecord, PoolError, check_pool_name, host_name, parse_target
from slurmpod.settings import default_state_dir


def add_hosts_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "hosts", help="host pools of the ssh provider (Slurm nodes on existing machines)")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--state-dir", type=Path, default=None, help="the registry is <state-dir>/ssh/hosts.json")
    hs = p.add_subparsers(dest="hosts_command", required=True)
    a = hs.add_parser("add", parents=[where], help="register user@host[:port] in a pool (pins its SSH host key)")
    a.add_argument("target", help="user@host[:port] (user root or a user with password-less sudo)")
    a.add_argument("--pool", required=True, help="pool name (one instance type per pool)")
    a.add_argument("--instance-type", required=True, help="the ml.* type whose instances this pool serves")
    a.add_argument("--key", required=True, type=Path, help="private key file to log in with")
    a.add_argument("--allow-reboot", action="store_true", help="node reboots really reboot the machine")
    a.add_argument("--allow-faults", action="store_true",
                   help="`slurmpod faults inject` may inject rehearsal faults on this machine (refused otherwise)")
    a.add_argument("--apt-install", action="store_true",
                   help="let slurmpod apt-get install slurmd/slurmctld/munge when they are missing")
    a.add_argument("--no-contact", action="store_true", help="register without connecting (key pinned at launch)")
    hs.add_parser("list", parents=[where], help="the registered hosts, free or in use").add_argument(
        "--json", action="store_true")
    r = hs.add_parser("remove", parents=[where], help="unregister a free host")
    r.add_argument("host", help="user@host:port as listed, or the host address")
    p.set_defaults(func=run_hosts)
    return p


def run_hosts(args: argparse.Namespace) -> int:
    pool = HostPool(Path(args.state_dir) if args.state_dir else default_state_dir())
    try:
        if args.hosts_command == "add":
            return _add(pool, args)
        if args.hosts_command == "remove":
            rec = pool.remove(args.host)
            print(f"removed {rec.name} from pool {rec.pool}")
            return 0
        return _list(pool, args.json)
    except (PoolError, ProviderError) as exc:
        print(f"slurmpod hosts: {exc}", file=sys.stderr)
        return 1


def _add(pool: HostPool, args: argparse.Namespace) -> int:
    # asyncssh (the ``ssh`` extra) is imported only by commands that contact a host: every other command starts
    # without it
    try:
        from slurmpod.providers.ssh.session import SshSessions, Target, key_fingerprint
    except ModuleNotFoundError as exc:
        if exc.name != "asyncssh":
            raise
        raise PoolError("contacting a host needs asyncssh: pip install 'slurmpod[ssh]'") from exc

    user, host, port = parse_target(args.target)
    check_pool_name(args.pool)
    if not args.instance_type.startswith("ml."):
        raise PoolError(f"instance type {args.instance_type!r} is not an ml.* type")
    key = args.key.resolve()
    if not key.is_file():
        raise PoolError(f"key file {key} does not exist")
    name = host_name(user, host, port)
    rec = HostRecord(name=name, pool=args.pool, instance_type=args.instance_type, user=user, host=host, port=port,
                     key=str(key), allow_reboot=args.allow_reboot, allow_faults=args.allow_faults,
                     apt_install=args.apt_install)
    if not args.no_contact:
        sessions = SshSessions()
        try:
            host_key, _ = sessions.pin(Target(name, host, port, user, str(key)))
            res = sessions.run(Target(name, host, port, user, str(key), host_key), ["true"], timeout=20)
            if res.returncode != 0:
                raise PoolError(f"{name}: cannot run commands as root there: {res.stderr.strip()[-200:]}")
        finally:
            sessions.close()
        rec.host_key = host_key
    pool.add(rec)
    shown = f"{rec.host_key.split()[0]} {key_fingerprint(rec.host_key)}" if rec.host_key else "not pinned yet"
    print(f"added {name} to pool {rec.pool} ({rec.instance_type}); host key {shown}")
    print("instances of this type now launch on the pool's hosts (restart `slurmpod server` if it runs without "
          "pools); other types stay on the local provider")
    return 0


def _list(pool: HostPool, as_json: bool) -> int:
    hosts = pool.hosts()
    if as_json:
        print(json.dumps([h.to_json() for h in hosts], indent=1))
        return 0
    if not hosts:
        print("no hosts registered: every instance runs on the local provider")
        return 0
    now = time.time()
    print(f"{'HOST':<28} {'POOL':<12} {'INSTANCE TYPE':<18} {'STATE':<10} {'NODE':<40} LAST ERROR")
    for h in hosts:
        state = "in-use" if not h.free else ("resting" if h.quarantined(now) else "free")
        node = f"{h.cluster_id}/{h.instance_id} {h.hostname} {h.ip}" if not h.free else ""
        print(f"{h.name:<28} {h.pool:<12} {h.instance_type:<18} {state:<10} {node:<40} {h.last_error[:80]}")
    types = sorted({h.instance_type for h in hosts})
    print(f"routing: {', '.join(types)} -> ssh pools (capacity = number of hosts); other types -> local provider")
    return 0
