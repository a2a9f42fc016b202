"""Options every ``slurmpod`` command takes anywhere on its command line, ``--help`` examples, ``--version``.

``--state-dir``, ``--db`` and ``--region`` are accepted before the command (``slurmpod --state-dir D capacity
show``), after it, and after its subcommand (``slurmpod capacity set ml.c5.xlarge=1 --state-dir D``): every
parser of the tree gets them with ``argparse.SUPPRESS`` as default, so a later position never resets an earlier
one, and ``fill_common`` supplies the defaults afterwards: ``$SLURMPOD_STATE_DIR`` (else /var/lib/slurmpod),
``$SLURMPOD_DB`` (else SQLite under the state dir) and no region (each tool then uses ``$SLURMPOD_REGION``, else
the server's ``--region`` recorded in the database, else us-east-1).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

from slurmpod.settings import default_state_dir

COMMON = {
    "--state-dir": "state directory (default $SLURMPOD_STATE_DIR, else /var/lib/slurmpod)",
    "--db": "database URL (default $SLURMPOD_DB, else SQLite under the state dir)",
    "--region": "AWS region name the command works in (default $SLURMPOD_REGION, else the server's --region)",
}

EXAMPLES: dict[str, str] = {
    "": "  slurmpod credentials create\n  slurmpod server --port 8080 &\n"
        "  slurmpod capacity set ml.c5.xlarge=1 --state-dir /var/lib/slurmpod\n  slurmpod audit --follow",
    "server": "  slurmpod server --port 8080\n  slurmpod server --region ap-northeast-1 --provider simulated\n"
              "  slurmpod server --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem\n"
              "  SLURMPOD_DB=postgresql+psycopg://slurmpod@db/slurmpod slurmpod server\n"
              "  slurmpod server --db postgresql+psycopg://slurmpod@db/slurmpod --reuse-port  # one per replica",
    "credentials": "  slurmpod credentials create --account 111122223333\n  slurmpod credentials list\n"
                   "  slurmpod credentials delete AKIAEXAMPLEEXAMPLE00",
    "credentials create": "  slurmpod credentials create\n  slurmpod credentials create --account 111122223333",
    "credentials list": "  slurmpod credentials list --state-dir /var/lib/slurmpod",
    "credentials delete": "  slurmpod credentials delete AKIAEXAMPLEEXAMPLE00",
    "secrets": "  slurmpod secrets create acct-db --from-file db.json\n  slurmpod secrets list\n"
               "  slurmpod secrets delete acct-db",
    "secrets create": "  slurmpod secrets create acct-db --from-file db.json   # {\"username\": …, \"password\": …}\n"
                      "  echo '{…}' | slurmpod secrets create acct-db --from-file - --region ap-northeast-1",
    "secrets list": "  slurmpod secrets list --account 111122223333",
    "secrets delete": "  slurmpod secrets delete acct-db",
    "cleanup": "  slurmpod cleanup --check\n  slurmpod cleanup",
    "connect": "  slurmpod connect sagemaker-cluster:tyjxlpi1nicr_controller-group-i-0fbd4b7ba6f3b477f\n"
               "  slurmpod connect --cluster hyperpod-api-driven-cluster -- sinfo\n"
               "  slurmpod connect --cluster my-cluster --group compute-group --region ap-northeast-1 -- hostname",
    "capacity": "  slurmpod capacity set ml.c5.xlarge=1 ml.p5.48xlarge=0\n  slurmpod capacity unset ml.c5.xlarge\n"
                "  slurmpod capacity show --state-dir /var/lib/slurmpod",
    "capacity set": "  slurmpod capacity set ml.c5.xlarge=1 --state-dir /var/lib/slurmpod",
    "capacity unset": "  slurmpod capacity unset ml.c5.xlarge",
    "capacity show": "  slurmpod capacity show",
    "migrate": "  slurmpod migrate legacy-cluster\n  slurmpod migrate legacy-cluster --region ap-northeast-1",
    "webhooks": "  slurmpod webhooks add my-cluster https://hooks.example/slurm\n  slurmpod webhooks list my-cluster",
    "webhooks add": "  slurmpod webhooks add my-cluster https://hooks.example/slurm",
    "webhooks remove": "  slurmpod webhooks remove my-cluster https://hooks.example/slurm",
    "webhooks list": "  slurmpod webhooks list my-cluster --region ap-northeast-1",
    "demo": "  slurmpod demo\n  slurmpod demo --down",
    "events": "  slurmpod events my-cluster\n  slurmpod events my-cluster --follow --group compute-group\n"
              "  slurmpod events my-cluster --endpoint-url http://10.0.0.5:8080 --region ap-northeast-1",
    "hosts": "  slurmpod hosts add --pool gpu --instance-type ml.p5.48xlarge root@10.0.0.5 --key ~/.ssh/pool\n"
             "  slurmpod hosts list\n  slurmpod hosts remove root@10.0.0.5:22",
    "hosts add": "  slurmpod hosts add --pool gpu --instance-type ml.p5.48xlarge root@10.0.0.5 --key ~/.ssh/pool",
    "hosts list": "  slurmpod hosts list --json",
    "hosts remove": "  slurmpod hosts remove root@10.0.0.5:22",
    "images": "  slurmpod images list\n  slurmpod images build --suite trixie\n"
              "  slurmpod images mark ami-0123456789abcdef0 --security-update-required",
    "images list": "  slurmpod images list\n  slurmpod images list --store",
    "images build": "  slurmpod images build\n  slurmpod images build --suite bookworm --packages htop,jq",
    "images import": "  slurmpod images import rootfs.tar",
    "images register": "  slurmpod images register default",
    "images delete": "  slurmpod images delete ami-0123456789abcdef0",
    "images publish": "  slurmpod images publish --script extra-setup.sh",
    "images mark": "  slurmpod images mark ami-0123456789abcdef0 --end-of-life",
    "audit": "  slurmpod audit\n  slurmpod audit --follow\n  slurmpod audit --event-name UpdateClusterSoftware --json\n"
             "  slurmpod audit --account 123456789012 --region ap-northeast-1 --errors",
}


def _children(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) not in seen:  # aliases map to the same parser
                    seen.add(id(child))
                    yield name, child


def spread_common(parser: argparse.ArgumentParser, path: str = "") -> None:
    """Gives every parser of the tree the common options (defaults suppressed) and its examples epilog."""
    for option, text in COMMON.items():
        existing = parser._option_string_actions.get(option)
        if existing is None:
            parser.add_argument(option, default=argparse.SUPPRESS, help=text)
        else:
            existing.default = argparse.SUPPRESS
    examples = EXAMPLES.get(path)
    if examples and not parser.epilog:
        parser.epilog = "examples:\n" + examples
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for name, child in _children(parser):
        spread_common(child, f"{path} {name}".strip())


def fill_common(args: argparse.Namespace) -> argparse.Namespace:
    if getattr(args, "state_dir", None) is None:
        args.state_dir = str(default_state_dir())
    if getattr(args, "db", None) is None:
        args.db = os.environ.get("SLURMPOD_DB") or None
    if not hasattr(args, "region"):
        args.region = None
    return args


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("slurmpod")
    except PackageNotFoundError:
        from slurmpod import __version__

        return __version__
