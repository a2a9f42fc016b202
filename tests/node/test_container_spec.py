"""The pure parts of ``srun --container-*``: Pyxis's mount specs, enroot's image URIs, the image's environment."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmpod.node import container
from slurmpod.node.container_spec import (
    ImageRef,
    Mount,
    SpecError,
    check_container_name,
    image_env,
    parse_env_names,
    parse_image,
    parse_mounts,
)


def test_mounts_pyxis_syntax() -> None:
    assert parse_mounts("/fsx:/fsx") == [Mount("/fsx", "/fsx")]
    assert parse_mounts("/fsx:/data:ro,/home/ubuntu:/h:rw,/scratch") == [
        Mount("/fsx", "/data", True), Mount("/home/ubuntu", "/h", False), Mount("/scratch", "/scratch")]
    assert parse_mounts("/fsx/:/fsx/") == [Mount("/fsx", "/fsx")]


@pytest.mark.parametrize(("spec", "says"), [
    ("/fsx:fsx", "'fsx' is not an absolute path"),
    ("fsx:/fsx", "'fsx' is not an absolute path"),
    ("/fsx:/fsx:rx", "unknown flag 'rx'"),
    ("/a:/b:ro:x", "too many ':'"),
    ("/fsx:/fsx,,/x:/x", "empty entry"),
    ("/fsx:/", "over the container's /"),
    ("/fsx/../etc:/e", "may not contain '..'"),
])
def test_malformed_mounts_name_the_bad_part(spec: str, says: str) -> None:
    with pytest.raises(SpecError, match="--container-mounts") as err:
        parse_mounts(spec)
    assert says in str(err.value)


def test_image_uris_enroot_syntax() -> None:
    assert parse_image("ubuntu") == ImageRef(name="ubuntu", tag="latest")
    assert parse_image("tiny:1") == ImageRef(name="tiny", tag="1")
    assert parse_image("nvcr.io#nvidia/pytorch:24.01-py3") == ImageRef(name="nvidia/pytorch", tag="24.01-py3",
                                                                       registry="nvcr.io")
    assert parse_image("10.1.2.1:5000#team/app:v2") == ImageRef(name="team/app", tag="v2", registry="10.1.2.1:5000")
    assert parse_image("user@nvcr.io#nvidia/pytorch:1").registry == "nvcr.io"  # enroot's credentials: ignored
    digest = "sha256:" + "a" * 64
    assert parse_image(f"app@{digest}") == ImageRef(name="app", digest=digest)
    assert parse_image("/fsx/images/app.sqsh") == ImageRef(path="/fsx/images/app.sqsh")
    assert parse_image("/fsx/images/app.tar.gz").path == "/fsx/images/app.tar.gz"


def test_image_references_default_to_the_cluster_registry() -> None:
    assert parse_image("tiny:1").reference("10.231.7.1:5000") == "10.231.7.1:5000/tiny:1"
    assert parse_image("nvcr.io#nvidia/pytorch:24").reference("10.231.7.1:5000") == "nvcr.io/nvidia/pytorch:24"
    digest = "sha256:" + "b" * 64
    assert parse_image(f"app@{digest}").reference("r:5000") == f"r:5000/app@{digest}"


@pytest.mark.parametrize(("uri", "says"), [
    ("", "empty image name"),
    ("Ubuntu:1", "bad image name"),
    ("ubuntu:bad tag", "bad tag"),
    ("bad host!#x", "bad registry"),
    ("app@sha256:xyz", "bad digest"),
    ("./app.sqsh", "must be an absolute path"),
    ("/fsx/app.img", "an image file ends in"),
])
def test_bad_image_uris(uri: str, says: str) -> None:
    with pytest.raises(SpecError, match="--container-image") as err:
        parse_image(uri)
    assert says in str(err.value)


def test_image_env_wins_except_container_env_and_slurm() -> None:
    env = ["PATH=/opt/conda/bin:/usr/bin", "LANG=C.UTF-8", "SLURM_PROCID=9", "NOVALUE", "1BAD=x", "HOME=/root"]
    assert image_env(env, keep=["HOME"]) == [("PATH", "/opt/conda/bin:/usr/bin"), ("LANG", "C.UTF-8")]
    assert parse_env_names("PATH, LD_LIBRARY_PATH") == ["PATH", "LD_LIBRARY_PATH"]
    with pytest.raises(SpecError, match="bad variable name"):
        parse_env_names("PATH,1X")


def test_container_names() -> None:
    assert check_container_name("train-1.a_b") == "train-1.a_b"
    for bad in ("", "-x", "a/b", "x" * 65):
        with pytest.raises(SpecError, match="--container-name"):
            check_container_name(bad)
    assert container.container_name("12", "3", "") == "slurmpod-12-3"
    assert container.container_name("12", "batch", "keep") == "slurmpod-12-n-keep"


def _start_args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"job": "5", "step": "0", "uid": 1000, "gid": 1000, "image": "tiny:1", "mounts": "",
                               "workdir": "", "name": "", "env": "", "mount_home": False, "bind_ro": ""}
    base.update(kw)
    return argparse.Namespace(**base)


def test_start_refuses_bad_input_before_touching_podman(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(container, "podman", lambda *a, **k: calls.append(a))
    for args, says in ((_start_args(mounts="/fsx:fsx"), "not an absolute path"),
                       (_start_args(image="Bad:1"), "bad image name"),
                       (_start_args(workdir="rel"), "--container-workdir"),
                       (_start_args(name="a/b"), "--container-name"),
                       (_start_args(mounts="/no/such/dir:/x"), "/no/such/dir does not exist")):
        with pytest.raises((SpecError, container.ContainerError), match=".") as err:
            container.start(args)
        assert says in str(err.value)
    assert calls == []


def test_helper_main_prints_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc = container.main(["start", "--job", "1", "--step", "0", "--uid", "1000", "--gid", "1000",
                         "--image", "tiny:1", "--mounts", "/a:/b:zz"])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["slurmpod-container: --container-mounts: '/a:/b:zz': unknown flag 'zz' (ro or rw)"]


def test_run_argv_keeps_the_node_namespaces_and_mounts() -> None:
    user = container.User(0, 0)
    argv = container.run_argv("slurmpod-1-0", "1", "r/tiny:1", user, [Mount("/fsx", "/fsx"), Mount("/a", "/b", True)],
                              named=False)
    assert argv[:2] == ["run", "--detach"] and argv[-2:] == ["r/tiny:1", "-P"]
    for flag in ("--network=host", "--ipc=host", "--uts=host", "--cgroups=disabled"):
        assert flag in argv
    assert "type=bind,source=/fsx,destination=/fsx" in argv
    assert "type=bind,source=/a,destination=/b,ro=true" in argv
    assert f"{container.JOB_LABEL}=1" in argv and f"{container.NAMED_LABEL}=0" in argv


@pytest.mark.skipif(shutil.which("gcc") is None or not Path("/usr/include/slurm/spank.h").exists()
                    and not any(Path("/var/lib/slurmpod/images").glob("*/rootfs/usr/include/slurm/spank.h")),
                    reason="needs gcc and Slurm's spank.h")
def test_plugin_compiles_warning_free(tmp_path: Path) -> None:
    header = next(p for p in [Path("/usr/include/slurm/spank.h"),
                               *Path("/var/lib/slurmpod/images").glob("*/rootfs/usr/include/slurm/spank.h")]
                   if p.exists())
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc/slurm").symlink_to(header.parent)
    src = Path(container.__file__).with_name("spank_containers.c")
    r = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(tmp_path / "inc"),
                        "-o", str(tmp_path / "p.so"), str(src)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
