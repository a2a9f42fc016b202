"""``slurmpod images``: the image catalogue of a state dir (list, publish, mark, delete) and the host-wide image
store behind it (build, import, register). See ``slurmpod.lifecycle.imagestore`` for the store's design."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from slurmpod.cli.options import die
from slurmpod.lifecycle.imagestore import PRIMARY_SUITE, default_image_store
from slurmpod.settings import Settings, default_state_dir


def add_images_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds the ``images`` subcommand to ``sub`` (an argparse subparsers object)."""
    i: argparse.ArgumentParser = sub.add_parser("images", help="images (AMIs): build, import, list, publish, mark, "
                                                               "delete")
    store_help = "host-wide image store shared by every state dir (default $SLURMPOD_IMAGE_STORE or " \
                 "/var/lib/slurmpod/images)"
    i.add_argument("--state-dir", default=str(default_state_dir()))
    i.add_argument("--db", default=None)
    i.add_argument("--image-store", default=str(default_image_store()), help=store_help)
    # the same options also after the subcommand (`images build --state-dir X`); SUPPRESS keeps the value given
    # before it (argparse copies a subcommand's defaults over the parent's values)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--state-dir", default=argparse.SUPPRESS)
    where.add_argument("--db", default=argparse.SUPPRESS)
    where.add_argument("--image-store", default=argparse.SUPPRESS, help=store_help)
    isub = i.add_subparsers(dest="images_command", required=True)
    il = isub.add_parser("list", parents=[where], help="list image releases")
    il.add_argument("--store", action="store_true", help="list the image store's contents instead")
    b = isub.add_parser("build", parents=[where], help="build a root filesystem image with mmdebstrap (as root)")
    b.add_argument("--suite", default=PRIMARY_SUITE, help=f"Debian suite (default {PRIMARY_SUITE}: Slurm 24.11; "
                                                            "bookworm: 22.05; sid: Debian unstable's)")
    b.add_argument("--packages", default="", help="extra Debian packages a,b,... on top of the node's base set")
    b.add_argument("--script", default=None, help="bash file run inside the image (chroot) after the packages")
    b.add_argument("--release", default=None, help="release version X.Y.Z (default: next patch)")
    b.add_argument("--description", default=None)
    b.add_argument("--cache", default=None, help="apt download cache reused by every build "
                                                 "(default /var/cache/slurmpod/apt)")
    b.add_argument("--store-only", action="store_true", help="only store the image; register it in no catalogue")
    b.add_argument("--default", action="store_true",
                   help="the store's default image of --suite for the current recipe: built only if missing "
                        "(install.sh); trixie's is also the store's default (--node-image default)")
    b.add_argument("--verbose", "-v", action="store_true", help="show all of mmdebstrap's output")
    m = isub.add_parser("import", parents=[where], help="import a root filesystem (directory or tar, e.g. "
                                                        "`podman export` output)")
    m.add_argument("source", help="directory or tar file")
    m.add_argument("--release", default=None, help="release version X.Y.Z (default: next patch)")
    m.add_argument("--description", default=None)
    m.add_argument("--store-only", action="store_true", help="only store the image; register it in no catalogue")
    r = isub.add_parser("register", parents=[where], help="add an image of the store (or its default) to this "
                                                          "state dir's catalogue")
    r.add_argument("image_id", help="ami-... or `default`")
    r.add_argument("--release", default=None)
    d = isub.add_parser("delete", parents=[where], help="delete an image (refused while nodes use it)")
    d.add_argument("image_id")
    d.add_argument("--force", action="store_true", help="also delete the store's default image")
    ip = isub.add_parser("publish", parents=[where], help="publish a new release whose baseline runs an extra "
                                                          "setup step")
    ip.add_argument("--from", dest="base", default=None, help="base release (default: latest)")
    ip.add_argument("--script", default=None, help="bash file run as root in every node of the release")
    ip.add_argument("--release", default=None, help="release version X.Y.Z (default: next patch)")
    ip.add_argument("--description", default=None)
    im = isub.add_parser("mark", parents=[where], help="mark a release")
    im.add_argument("image_id")
    flag = im.add_mutually_exclusive_group(required=True)
    flag.add_argument("--security-update-required", action="store_true")
    flag.add_argument("--end-of-life", action="store_true")
    i.set_defaults(func=cmd_images)
    return i


def _progress(line: str) -> None:
    print(f"== {line}" if not line.startswith(" ") else line, flush=True)


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB" if size else "-"


def cmd_images(args: argparse.Namespace) -> int:
    from slurmpod.lifecycle.imagebuild import BuildError
    from slurmpod.lifecycle.images import ImageError
    from slurmpod.lifecycle.imagestore import ImageStore, ImageStoreError

    images = ImageStore(Path(args.image_store))
    try:
        if args.images_command == "list" and args.store:
            return _list_store(images)
        if args.images_command in ("build", "import") and args.store_only:
            return _make(args, images, None)
        from slurmpod.store.sql import SqlStore

        store = SqlStore(Settings(state_dir=Path(args.state_dir), db_url=args.db).database_url)
        try:
            return _with_catalog(args, images, store)
        finally:
            store.close()
    except BuildError as exc:
        print(f"slurmpod: images {args.images_command}: {exc}", file=sys.stderr)
        return exc.code
    except ImageStoreError as exc:
        print(f"slurmpod: images {args.images_command}: {exc}", file=sys.stderr)
        return 1
    except (ImageError, OSError) as exc:
        return die(str(exc))


def _make(args: argparse.Namespace, images: Any, catalog: Any) -> int:
    """build / import into the store, then register in ``catalog`` (unless None)."""
    from slurmpod.lifecycle.imagebuild import DEFAULT_CACHE, BuildError, BuildRequest, build_image
    from slurmpod.lifecycle.imageimport import import_image
    from slurmpod.lifecycle.images import check_release
    from slurmpod.lifecycle.nodelayer import RECIPE_VERSION

    release = catalog.free_release(args.release) if catalog is not None else check_release(args.release or "1.0.1")
    if args.images_command == "import":
        manifest = import_image(images, Path(args.source), _progress, release=release,
                                description=args.description or "")
    else:
        packages = tuple(p.strip() for p in args.packages.split(",") if p.strip())
        if args.default and (packages or args.script):
            raise BuildError("--default builds the base recipe only (no --packages/--script)", 2)
        with images.default_lock(args.suite) if args.default else contextlib.nullcontext():
            found = images.default(RECIPE_VERSION, args.suite) if args.default else None
            if found is not None:
                manifest = found
                print(f"default image {manifest.id} ({manifest.suite}, Slurm {manifest.slurm_version}, recipe "
                      f"{RECIPE_VERSION}) is already built in {images.root}; nothing to do")
                if catalog is None:
                    return 0
            else:
                req = BuildRequest(suite=args.suite, packages=packages, release=release,
                                   script=Path(args.script) if args.script else None,
                                   description=args.description or "",
                                   cache=Path(args.cache) if args.cache else DEFAULT_CACHE, verbose=args.verbose)
                previous = str(images.default_pointer(args.suite).get("image_id", "")) if args.default else ""
                manifest = build_image(images, req, _progress)
                if args.default:
                    images.set_default(manifest, primary=args.suite == PRIMARY_SUITE)
                    if previous and previous != manifest.id and images.get(previous) and not images.live_refs(previous):
                        images.delete(previous)  # the default of an older recipe that no state dir registered
                        print(f"removed the previous default image {previous}")
    where = f"{images.root}/{manifest.id}"
    if catalog is None:
        print(f"stored {manifest.id} ({manifest.suite}, Slurm {manifest.slurm_version}, {_mib(manifest.size)}) "
              f"in {where}")
        return 0
    image = catalog.adopt(images, manifest.id, Path(args.state_dir))
    print(f"registered {image.image_id} release {image.release} ({manifest.suite}, Slurm {manifest.slurm_version}, "
          f"{_mib(manifest.size)}) from {where}")
    return 0


def _with_catalog(args: argparse.Namespace, images: Any, store: Any) -> int:
    from slurmpod.lifecycle.images import END_OF_LIFE, SECURITY_UPDATE_REQUIRED, ImageCatalog, image_users
    catalog = ImageCatalog(store)
    command = args.images_command
    if command in ("build", "import"):
        return _make(args, images, catalog)
    if command == "register":
        image = catalog.adopt(images, args.image_id, Path(args.state_dir), args.release)
        print(f"registered {image.image_id} release {image.release}")
        return 0
    if command == "delete":
        return _delete(args, images, catalog, image_users(store))
    if command == "publish":
        script = Path(args.script).read_text() if args.script else ""
        image = catalog.publish(base=args.base, script=script, description=args.description or "",
                                now=time.time(), release=args.release)
        print(f"published {image.image_id} release {image.release}")
        return 0
    if command == "mark":
        status = SECURITY_UPDATE_REQUIRED if args.security_update_required else END_OF_LIFE
        image = catalog.mark(args.image_id, status)
        print(f"{image.image_id} ({image.release}) marked {status}")
        return 0
    releases = catalog.releases()
    latest = releases[-1].image_id
    print(f"{'IMAGE ID':<22} {'RELEASE':<8} {'KIND':<7} {'SUITE':<9} {'SLURM':<20} {'SIZE':>8} {'STATUS':<22} "
          "DESCRIPTION")
    for i in releases:
        tag = " (default, latest)" if i.image_id == latest else ""
        suite = i.suite or ("host" if i.kind == "host" else "-")
        print(f"{i.image_id:<22} {i.release:<8} {i.kind:<7} {suite:<9} {i.slurm_version or '-':<20} "
              f"{_mib(i.size):>8} {i.status:<22} {i.description}{tag}")
    return 0


def _delete(args: argparse.Namespace, images: Any, catalog: Any, users: dict[str, list[str]]) -> int:
    from slurmpod.lifecycle.images import ImageError

    state = Path(args.state_dir)
    registered = catalog.get(args.image_id)
    stored = images.get(args.image_id)
    if registered is None and stored is None:
        raise ImageError(f"Image {args.image_id} not found (neither in this catalogue nor in {images.root}).")
    if registered is not None:
        catalog.remove(args.image_id, users)
        images.drop_ref(args.image_id, state)
        print(f"deleted {args.image_id} (release {registered.release}) from the catalogue of {state}")
    if stored is None or any(i.digest == stored.digest for i in catalog.releases()):
        return 0  # not a store image, or a release published from it still needs its files
    others = images.live_refs(args.image_id)
    if others:
        print(f"its files stay in {images.root}: also registered by {', '.join(others[:3])}")
        return 0
    if images.default_pointer().get("image_id") == args.image_id and not args.force:
        print(f"its files stay in {images.root}: it is the store's default image (--force deletes it)")
        return 0
    images.delete(args.image_id)
    print(f"removed {images.root}/{args.image_id}")
    return 0


def _list_store(images: Any) -> int:
    default = images.default_pointer().get("image_id")
    print(f"{'IMAGE ID':<22} {'SUITE':<9} {'SLURM':<20} {'SIZE':>8} {'SOURCE':<7} {'REFS':>4} CREATED")
    for m in images.manifests():
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.created))
        tag = " (default)" if m.id == default else (
            f" ({m.suite} default)" if images.default_pointer(m.suite).get("image_id") == m.id else "")
        print(f"{m.id:<22} {m.suite:<9} {m.slurm_version:<20} {_mib(m.size):>8} {m.source:<7} "
              f"{len(images.live_refs(m.id)):>4} {created}{tag}")
    return 0
