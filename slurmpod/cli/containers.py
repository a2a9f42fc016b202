"""``slurmpod containers``: the cluster's container registry (``srun --container-image=IMAGE:TAG``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slurmpod.cli.options import die
from slurmpod.settings import default_state_dir


def add_containers_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "containers", help="container images for jobs (srun --container-image): the cluster's registry",
        epilog="examples:\n  slurmpod containers import ./rootfs --name myimage:1\n"
               "  slurmpod containers import image.sqsh --name pytorch:24.01\n  slurmpod containers status",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state-dir", default=str(default_state_dir()))
    csub = p.add_subparsers(dest="containers_command", required=True)
    i = csub.add_parser("import", help="push a root filesystem (directory, tar, .sqsh) or an image archive "
                                       "(docker/podman save) to the registry",
                        epilog="examples:\n  slurmpod containers import ./rootfs --name myimage:1\n"
                               "  slurmpod containers import /fsx/images/app.sqsh --name app:2\n"
                               "  slurmpod containers import saved.tar --name pytorch:24.01   "
                               "# docker save / podman save output",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("source", help="directory, tar file, .sqsh file or image archive")
    i.add_argument("--name", required=True, help="IMAGE[:TAG] (what --container-image names)")
    i.add_argument("--state-dir", default=argparse.SUPPRESS)
    s = csub.add_parser("status", help="where the registry listens",
                        epilog="examples:\n  slurmpod containers status --state-dir /var/lib/slurmpod",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--state-dir", default=argparse.SUPPRESS)
    p.set_defaults(func=cmd_containers)
    return p


def cmd_containers(args: argparse.Namespace) -> int:
    from slurmpod.lifecycle.containerimport import ContainerImportError, import_image
    from slurmpod.providers.local.registry import ContainerRegistry

    state = Path(args.state_dir)
    if args.containers_command == "status":
        up = ContainerRegistry(state).status()
        if not up:
            print("the container registry is not running (it runs with the server once a cluster exists)")
            return 1
        for ip, pid in up:
            print(f"{ip}:{ContainerRegistry(state).port} (docker-registry, pid {pid})")
        return 0
    try:
        ref = import_image(state, Path(args.source), args.name)
    except ContainerImportError as exc:
        die(f"containers import: {exc}")
        return exc.code
    print(f"pushed {ref}: srun --container-image={args.name} ...")
    return 0
