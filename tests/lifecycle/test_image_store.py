"""The image store and catalogue without a real build: staging and atomic commit, manifests, the default
pointer, references, tolerant catalogue rows, delete refusals, and bad build/import input (each a clear error
that leaves nothing in the store). mmdebstrap is replaced by small fake scripts on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.lifecycle import imagebuild
from slurmpod.lifecycle.imagebuild import BuildError, BuildRequest, ProgressFilter, build_image, sources
from slurmpod.lifecycle.images import BUILTIN, Image, ImageCatalog, ImageError, image_users
from slurmpod.lifecycle.imagestore import ImageStore, ImageStoreError, Manifest, mounts_under
from slurmpod.store.sql import SqlStore

REPO = Path(__file__).resolve().parents[2]
AMI = "ami-0123456789abcdef0"
TRIXIE = "ami-0123456789abcdef1"


class Settings(dict):  # the SettingsStore protocol on a dict
    def get_setting(self, key: str) -> object:
        return self.get(key)

    def put_setting(self, key: str, value: object) -> None:
        self[key] = json.loads(json.dumps(value))


def manifest(image_id: str = AMI, **kw: object) -> Manifest:
    base: dict[str, object] = {"id": image_id, "release": "1.0.1", "suite": "bookworm", "slurm_version": "22.05.8",
                               "packages": (), "size": 1 << 20, "created": 1.0, "digest": "sha256:" + "0" * 64,
                               "description": "d"}
    return Manifest.from_dict({**base, **kw})


def leftovers(store: ImageStore) -> list[str]:
    return sorted(p.name for p in store.root.iterdir()) if store.root.exists() else []


# ---- store ---------------------------------------------------------------------------------------------


def test_commit_is_atomic_read_only_and_deduplicated(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    with store.staging() as stage:
        stage.rootfs.mkdir()
        (stage.rootfs / "etc").mkdir()
        assert stage.path.name.startswith(".build-")
        got = store.commit(stage, manifest())
    assert leftovers(store) == [AMI]
    assert store.get(AMI) == got and store.manifests() == [got]
    assert store.image_dir(AMI).stat().st_mode & 0o777 == 0o555
    assert store.rootfs(AMI).stat().st_mode & 0o777 == 0o555
    assert (store.image_dir(AMI) / "manifest.json").stat().st_mode & 0o777 == 0o444
    with store.staging() as stage:  # the same bits again: the stored image wins, the copy is dropped
        stage.rootfs.mkdir()
        assert store.commit(stage, manifest(description="other")).description == "d"
    assert leftovers(store) == [AMI]
    store.delete(AMI)
    assert leftovers(store) == [] and store.get(AMI) is None


def test_failed_staging_leaves_nothing_and_never_descends_into_mounts(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    with pytest.raises(RuntimeError), store.staging() as stage:
        (stage.rootfs / "var").mkdir(parents=True)
        raise RuntimeError("build failed")
    assert leftovers(store) == []
    if os.geteuid() != 0:
        pytest.skip("the mount part needs root")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "keep.deb").write_text("precious")
    with pytest.raises(RuntimeError), store.staging() as stage:
        target = stage.rootfs / "var/cache/apt/archives"
        target.mkdir(parents=True)
        subprocess.run(["mount", "--bind", str(cache), str(target)], check=True, timeout=10)
        assert mounts_under(stage.path) == [str(target)]
        raise RuntimeError("interrupted")
    assert leftovers(store) == [] and (cache / "keep.deb").read_text() == "precious"


def test_sweep_removes_builds_of_dead_processes(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    dead = store.root / ".build-dead"
    (dead / "rootfs").mkdir(parents=True)
    (dead / "pid").write_text("999999999\n")
    alive = store.root / ".build-alive"
    alive.mkdir()
    (alive / "pid").write_text(f"{os.getppid()}\n")
    assert store.sweep() == [dead]
    assert leftovers(store) == [".build-alive"]


def test_default_pointer_and_refs(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    with store.staging() as stage:
        stage.rootfs.mkdir()
        m = store.commit(stage, manifest(recipe=3))
    assert store.default(3, "bookworm") is None
    store.set_default(m)
    assert store.default(3, "bookworm") == m
    assert store.default(4, "bookworm") is None and store.default(3, "trixie") is None
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    store.add_ref(AMI, a)
    store.add_ref(AMI, b)
    b.rmdir()  # a state dir that is gone no longer counts
    assert store.live_refs(AMI) == [str(a)]
    store.drop_ref(AMI, a)
    assert store.live_refs(AMI) == []
    store.delete(AMI)
    assert store.default_pointer() == {}


def test_manifest_round_trip_is_tolerant() -> None:
    m = manifest(packages=("vim",))
    raw = json.loads(m.to_json())
    assert raw["packages"] == ["vim"] and raw["kind"] == "rootfs"
    assert Manifest.from_dict({**raw, "future_field": 1}) == m


# ---- catalogue -----------------------------------------------------------------------------------------


def test_old_catalogue_rows_load() -> None:
    settings = Settings(images=[{"image_id": "ami-00000000000000001", "release": "1.0.1", "root": "/",
                                 "description": "old row", "setup_script": "true\n", "status": "Current",
                                 "created": 5.0, "some_future_field": "x"}])
    cat = ImageCatalog(settings)
    old = cat.get("ami-00000000000000001")
    assert old is not None and old.kind == "host" and old.suite == "" and old.size == 0
    assert cat.releases()[0] == BUILTIN and cat.latest() == old


def test_register_publish_and_release_bumps() -> None:
    cat = ImageCatalog(Settings())
    assert cat.next_release() == "1.0.1"
    image = Image(image_id=AMI, release="1.0.1", root="/store/x/rootfs", description="built", suite="trixie",
                  slurm_version="24.11.5-4", size=9, digest="sha256:" + "1" * 64, kind="rootfs")
    assert cat.register(image) == image and cat.register(image) == image  # idempotent
    assert cat.resolve("default") == image
    derived = cat.publish(base=AMI, script="echo x", description="", now=2.0)
    assert (derived.kind, derived.root, derived.suite, derived.release) == ("rootfs", image.root, "trixie", "1.0.2")
    clash = Image(image_id="ami-1111111111111111a", release="1.0.2", root="/r", description="", kind="rootfs")
    assert cat.register(clash).release == "1.0.3"
    with pytest.raises(ImageError, match="already exists"):
        cat.free_release("1.0.1")
    with pytest.raises(ImageError, match="not a version"):
        cat.free_release("v2")


def _cluster(store: SqlStore, image_id: str) -> None:
    spec = ClusterSpec(name="c1", instance_groups=(InstanceGroupSpec(name="workers", instance_count=1),))
    store.create_cluster(ClusterRecord(cluster_id="abcdefghij01", account_id="123456789012", region="us-east-1",
                                       name="c1", arn="arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefghij01",
                                       spec=spec, status=ClusterStatus.IN_SERVICE, creation_time=1.0))
    store.add_nodes([NodeRecord(instance_id="i-0123456789abcdef0", cluster_id="abcdefghij01", group="workers", seq=1,
                                status=InstanceStatus.RUNNING, launch_time=1.0, image_id=image_id)])


def test_delete_refused_for_builtin_unknown_and_in_use(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        cat = ImageCatalog(store)
        cat.register(Image(image_id=AMI, release="1.0.1", root="/r", description="", kind="rootfs"))
        _cluster(store, AMI)
        users = image_users(store)
        assert users == {AMI: ["node i-0123456789abcdef0 (c1)"]}
        with pytest.raises(ImageError, match="in use by node i-0123456789abcdef0"):
            cat.remove(AMI, users)
        with pytest.raises(ImageError, match="built-in"):
            cat.remove(BUILTIN.image_id, users)
        with pytest.raises(ImageError, match="not found"):
            cat.remove("ami-99999999999999999", users)
        assert cat.get(AMI) is not None
        assert cat.remove(AMI, {}).image_id == AMI and cat.get(AMI) is None
    finally:
        store.close()


# ---- bad build input (no real build) -------------------------------------------------------------------


def test_request_and_suite_checks() -> None:
    with pytest.raises(BuildError, match="bad suite name") as e:
        imagebuild.check_request(BuildRequest(suite="Bookworm; rm"))
    assert e.value.code == 2
    with pytest.raises(BuildError, match="bad package name 'x y'"):
        imagebuild.check_request(BuildRequest(packages=("x y",)))
    with pytest.raises(BuildError, match="--script /nonexistent: no such file"):
        imagebuild.check_request(BuildRequest(script=Path("/nonexistent")))
    with pytest.raises(BuildError, match="unknown suite 'nosuch'") as e:
        sources("nosuch", lambda url: False)
    assert e.value.code == 2
    served = {"bookworm", "bookworm-updates"}
    lines = sources("bookworm", lambda url: url.split("/dists/")[1].split("/")[0] in served)
    assert lines == ["deb http://deb.debian.org/debian bookworm main",
                     "deb http://deb.debian.org/debian bookworm-updates main"]


def test_mmdebstrap_argv_reuses_the_cache(tmp_path: Path) -> None:
    req = BuildRequest(suite="bookworm", packages=("vim",), cache=tmp_path / "c c")
    argv = imagebuild.mmdebstrap_argv(req, tmp_path / "root", ["deb A bookworm main"], tmp_path / "s.sh")
    assert argv[:3] == ["mmdebstrap", "--mode=root", "--variant=apt"]
    inc = next(a for a in argv if a.startswith("--include="))
    assert inc.endswith(",vim") and "slurmd" in inc and "mariadb-server" in inc and "gettext-base" in inc
    for skip in ("essential/unlink", "download/empty", "cleanup/apt/cache"):
        assert f"--skip={skip}" in argv
    assert any(a.startswith("--setup-hook=") and f"mount --bind '{tmp_path}/c c'" in a for a in argv)
    hooks = [a for a in argv if a.startswith("--customize-hook=")]
    assert "chroot" in hooks[0] and "umount" in hooks[-1]
    assert argv[-3:] == ["bookworm", str(tmp_path / "root"), "deb A bookworm main"]
    assert not any("Valid-Until" in a for a in argv)  # a stable suite's apt options (and image) as they were
    sid = imagebuild.mmdebstrap_argv(BuildRequest(suite="sid"), tmp_path / "root", ["deb A sid main"], None)
    assert '--aptopt=Acquire::Check-Valid-Until "false"' in sid  # a mirror copy older than sid's week still works


def test_progress_filter_phases_and_failures() -> None:
    seen: list[str] = []
    f = ProgressFilter(seen.append, sources=["deb M bookworm main"], cache=Path("/c"), count=26)
    for line in ("I: automatically chosen mode: root", "I: running apt-get update...",
                 "I: downloading packages with apt...", "I: extracting archives...",
                 "I: installing remaining packages inside the chroot...", "slurmpod: script begin", "hello",
                 "slurmpod: script exit 3", "E: mmdebstrap failed"):
        f.feed(line + "\n")
    assert seen[0].startswith("resolving: package lists of bookworm (at ") and seen[0].endswith(" s)")
    assert seen[1].startswith("downloading")
    assert "  script| hello" in seen and len(seen) == 6
    err = f.failure(1, "bookworm")
    assert err.code == 2 and "--script failed with exit code 3" in str(err)
    g = ProgressFilter(seen.append, sources=[], cache=Path("/c"), count=1)
    g.feed("E: Unable to locate package nosuchpkg\n")
    g.feed("E: Package 'ghost' has no installation candidate\n")
    err = g.failure(100, "trixie")
    assert str(err) == "no such package in trixie: ghost, nosuchpkg" and err.code == 2


FAKE_MMDEBSTRAP = """#!/bin/sh
# a stand-in for mmdebstrap: makes a little tree in its target, then fails as told by $FAKE_MODE
for last; do :; done
eval "target=\\${$(($# - 3))}"
mkdir -p "$target/etc" && echo partial > "$target/etc/partial"
echo "I: running apt-get update..."
case "$FAKE_MODE" in
  missing) echo "E: Unable to locate package nosuchpkg"; exit 1;;
  script) echo "slurmpod: script begin" >&2; echo "oops" >&2; echo "slurmpod: script exit 7" >&2; exit 1;;
  term) kill -TERM "$PPID"; sleep 30;;
esac
exit 1
"""


@pytest.mark.parametrize(("mode", "code", "message"), [
    ("missing", 2, "no such package in trixie: nosuchpkg"),
    ("script", 2, "--script failed with exit code 7"),
    ("term", 130, "interrupted: nothing was stored"),
    ("other", 1, "mmdebstrap failed (exit code 1)"),
])
def test_failed_builds_leave_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, code: int,
                                     message: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("build_image needs root")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mmdebstrap").write_text(FAKE_MMDEBSTRAP)
    (bindir / "mmdebstrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MODE", mode)
    store = ImageStore(tmp_path / "images")
    script = tmp_path / "s.sh"
    script.write_text("exit 7\n")
    lines: list[str] = []
    with pytest.raises(BuildError) as e:
        build_image(store, BuildRequest(packages=("nosuchpkg",), script=script, cache=tmp_path / "cache"),
                    lines.append, exists=lambda url: True)
    assert message in str(e.value) and e.value.code == code
    assert "\n" not in str(e.value)
    assert leftovers(store) == []


# ---- CLI -----------------------------------------------------------------------------------------------


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURMPOD_IMAGE_STORE": str(tmp_path / "images")}
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", *argv, "--state-dir",
                           str(tmp_path / "state")], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)


def test_cli_import_of_what_is_not_a_rootfs(tmp_path: Path) -> None:
    notroot = tmp_path / "notroot"
    (notroot / "etc").mkdir(parents=True)
    (notroot / "etc/hello").write_text("hi")
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(os.urandom(4096))
    debian_no_slurm = tmp_path / "debian"
    from tests.lifecycle.test_rootfs import fake_rootfs

    fake_rootfs(debian_no_slurm, node=False)
    for source, expect in ((notroot, "not a root filesystem with systemd: missing /etc/os-release"),
                           (garbage, "does not look like a tar archive"),
                           (tmp_path / "missing", "no such file or directory"),
                           (debian_no_slurm, "install munge, passwd, slurm-client, slurmctld, slurmd, sudo")):
        r = _cli(tmp_path, "import", str(source))
        assert r.returncode == 2, r.stderr
        assert expect in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert leftovers(ImageStore(tmp_path / "images")) == []
    listed = _cli(tmp_path, "list")
    assert listed.returncode == 0 and listed.stdout.count("ami-") == 1  # only the built-in image


def test_cli_delete_refusals(tmp_path: Path) -> None:
    r = _cli(tmp_path, "delete", BUILTIN.image_id)
    assert r.returncode == 2 and "built-in image" in r.stderr
    r = _cli(tmp_path, "delete", "ami-99999999999999999")
    assert r.returncode == 2 and "not found" in r.stderr
    r = _cli(tmp_path, "build", "--suite", "Bad Suite")
    assert r.returncode == 2 and "bad suite name" in r.stderr


def test_cli_publish_keeps_working(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text("echo hi\n")
    env = {**os.environ, "SLURMPOD_IMAGE_STORE": str(tmp_path / "images")}
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(tmp_path / "state"),
                        "publish", "--script", str(script)], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0 and "release 1.0.1" in r.stdout, r.stderr
    listed = _cli(tmp_path, "list")
    assert "1.0.1" in listed.stdout and "(default, latest)" in listed.stdout


def _stored(store: ImageStore, **kw: object) -> Manifest:
    with store.staging() as stage:
        stage.rootfs.mkdir()
        return store.commit(stage, manifest(**kw))


def test_adopt_the_default_image(tmp_path: Path) -> None:
    from slurmpod.lifecycle.nodelayer import RECIPE_VERSION

    store = ImageStore(tmp_path / "images")
    cat = ImageCatalog(Settings())
    with pytest.raises(ImageError, match="install.sh builds the default image"):
        cat.adopt(store, "default", tmp_path)
    store.set_default(_stored(store, recipe=RECIPE_VERSION))  # a bookworm image: not the default suite's
    with pytest.raises(ImageError, match="install.sh builds the default image"):
        cat.adopt(store, "default", tmp_path)
    store.set_default(_stored(store, image_id=TRIXIE, recipe=RECIPE_VERSION, suite="trixie", slurm_version="24.11.5"))
    image = cat.adopt(store, "default", tmp_path)
    assert (image.image_id, image.kind, image.root) == (TRIXIE, "rootfs", str(store.rootfs(TRIXIE)))
    assert (image.suite, image.slurm_version, image.release) == ("trixie", "24.11.5", "1.0.1")
    assert cat.adopt(store, "bookworm", tmp_path).image_id == AMI
    assert cat.adopt(store, TRIXIE, tmp_path) == image
    assert store.live_refs(TRIXIE) == [str(tmp_path)]


def test_each_suite_has_its_default_and_trixie_is_the_store_default(tmp_path: Path) -> None:
    from dataclasses import replace

    from slurmpod.lifecycle.nodelayer import RECIPE_VERSION

    store = ImageStore(tmp_path / "images")
    bookworm = _stored(store, recipe=RECIPE_VERSION)
    trixie = replace(bookworm, id="ami-0000000000000beef", suite="trixie", slurm_version="24.11.5")
    store.set_default(bookworm, primary=False)  # a bookworm default is not the store's default
    store.set_default(trixie, primary=False)
    assert store.default_pointer()["image_id"] == trixie.id  # PRIMARY_SUITE's pointer
    assert store.default_pointer("trixie")["image_id"] == trixie.id
    assert store.default_pointer("bookworm")["image_id"] == bookworm.id
    cat = ImageCatalog(Settings())
    with pytest.raises(ImageError, match="install.sh builds the trixie default image"):
        cat.adopt(store, "trixie", tmp_path)  # pointed at, but not stored
    assert cat.adopt(store, "bookworm", tmp_path).image_id == bookworm.id
    with pytest.raises(ImageStoreError):
        store.default_pointer("../etc")
    # a store written before per-suite pointers: default.json answers for its own suite only
    store.set_default(bookworm)
    (store.root / "defaults" / "bookworm.json").unlink()
    assert store.default(RECIPE_VERSION, "bookworm") is not None and store.default_pointer("sid") == {}


def test_cli_register_and_delete_shared_files(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    _stored(store)
    env = {**os.environ, "SLURMPOD_IMAGE_STORE": str(store.root)}

    def cli(state: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", *argv, "--state-dir",
                               str(tmp_path / state)], cwd=REPO, capture_output=True, text=True, timeout=60, env=env)

    for state in ("a", "b"):
        (tmp_path / state).mkdir()
        r = cli(state, "register", AMI)
        assert r.returncode == 0 and f"registered {AMI} release 1.0.1" in r.stdout, r.stderr
    listed = cli("a", "list")
    assert "rootfs  bookworm  22.05.8" in listed.stdout and "1 MiB" in listed.stdout, listed.stdout
    r = cli("a", "delete", AMI)
    assert r.returncode == 0 and f"also registered by {tmp_path / 'b'}" in r.stdout, r.stdout + r.stderr
    assert store.get(AMI) is not None
    r = cli("b", "delete", AMI)
    assert r.returncode == 0 and "removed" in r.stdout and store.get(AMI) is None
    assert cli("b", "list", "--store").stdout.count("ami-") == 0


def test_import_refuses_a_tree_holding_the_store(tmp_path: Path) -> None:
    from slurmpod.lifecycle.imageimport import import_image

    with pytest.raises(BuildError, match="contains the image store") as e:
        import_image(ImageStore(tmp_path / "var/images"), tmp_path, print, release="1.0.1")
    assert e.value.code == 2 and not (tmp_path / "var/images").exists()


def test_server_node_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's nodes boot the store's default image; without one it refuses to start and says what to do;
    ``--node-image builtin`` (and the simulated provider) keep the legacy host-root image."""
    from slurmpod.lifecycle.nodelayer import RECIPE_VERSION
    from slurmpod.providers.base import SetupError
    from slurmpod.server import node_image
    from slurmpod.settings import Settings as ServerSettings

    store = ImageStore(tmp_path / "images")
    monkeypatch.setenv("SLURMPOD_IMAGE_STORE", str(store.root))
    local = ServerSettings(state_dir=tmp_path / "state")
    cat = ImageCatalog(Settings())
    with pytest.raises(SetupError, match="slurmpod images build --default.*--node-image builtin"):
        node_image(local, cat)
    assert cat.releases() == [BUILTIN]  # nothing registered by the refusal
    assert node_image(ServerSettings(state_dir=tmp_path / "state", node_image="builtin"), cat) == BUILTIN
    assert node_image(ServerSettings(state_dir=tmp_path / "state", provider="simulated"), cat) == BUILTIN
    store.set_default(_stored(store, recipe=RECIPE_VERSION, suite="trixie", slurm_version="24.11.5"))
    image = node_image(local, cat)
    assert (image.image_id, image.kind) == (AMI, "rootfs") and cat.latest() == image
    assert node_image(local, cat) == image  # registered once
    assert node_image(ServerSettings(state_dir=tmp_path / "state", node_image=AMI), cat) == image


def test_docker_cli_where_the_suite_splits_it_out() -> None:
    assert "docker-cli" not in BuildRequest(suite="bookworm").all_packages()
    trixie = BuildRequest(suite="trixie").all_packages()
    assert "docker-cli" in trixie and "docker.io" in trixie and "podman" in trixie
