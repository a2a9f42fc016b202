"""Fetching lifecycle sources: file://, https:// (local server), s3:// (botocore Stubber), hostile input."""

from __future__ import annotations

import functools
import http.server
import io
import os
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from slurmpod.lifecycle.sources import (
    LifecycleSourceError,
    SourceLimits,
    fetch_source,
    safe_relpath,
)
from tests.lifecycle.conftest import write_tree


def fetch(uri: str, tmp_path: Path, **kw) -> tuple[Path, list[str]]:
    dest = tmp_path / "dest"
    n = 0
    while dest.exists():
        n += 1
        dest = tmp_path / f"dest{n}"
    dest.mkdir()
    return dest, fetch_source(uri, dest, **kw)


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# --- names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"), [("a.sh", "a.sh"), ("./a/./b.sh", "a/b.sh"), ("a//b", "a/b"), ("x/", "x")]
)
def test_safe_relpath_normalises(name: str, expected: str) -> None:
    assert safe_relpath(name) == expected


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../x", "a/../../x", "a/..", ".", "a\\b", "a\nb"])
def test_safe_relpath_rejects(name: str) -> None:
    with pytest.raises(LifecycleSourceError):
        safe_relpath(name)


def test_unsupported_scheme(tmp_path: Path) -> None:
    with pytest.raises(LifecycleSourceError, match="Unsupported"):
        fetch("ftp://host/x", tmp_path)


# --- file:// -------------------------------------------------------------------------------------------


def test_file_directory(tmp_path: Path) -> None:
    src = write_tree(
        tmp_path / "src",
        {
            "on_create.sh": "#!/bin/bash\necho hi\n",
            "lib/util.py": "x = 1\n",
            "provisioning_parameters.json": "{}",
        },
        executable=["on_create.sh"],
    )
    dest, files = fetch(f"file://{src}", tmp_path)
    assert files == ["lib/util.py", "on_create.sh", "provisioning_parameters.json"]
    assert files_under(dest) == files
    assert (dest / "on_create.sh").read_text() == "#!/bin/bash\necho hi\n"
    assert os.stat(dest / "on_create.sh").st_mode & 0o777 == 0o755
    assert os.stat(dest / "lib/util.py").st_mode & 0o777 == 0o644


def test_file_single_file(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"setup.sh": "echo one\n"})
    dest, files = fetch(f"file://{src}/setup.sh", tmp_path)
    assert files == ["setup.sh"]
    assert (dest / "setup.sh").read_text() == "echo one\n"


def test_file_missing_and_relative(tmp_path: Path) -> None:
    with pytest.raises(LifecycleSourceError, match="does not exist"):
        fetch(f"file://{tmp_path}/nope", tmp_path)
    with pytest.raises(LifecycleSourceError, match="local"):
        fetch("file://otherhost/x", tmp_path)


def test_file_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(LifecycleSourceError, match="No lifecycle script files"):
        fetch(f"file://{tmp_path}/empty", tmp_path)


def test_file_symlink_inside_is_copied(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"real.sh": "echo real\n"})
    (src / "alias.sh").symlink_to("real.sh")
    dest, files = fetch(f"file://{src}", tmp_path)
    assert files == ["alias.sh", "real.sh"]
    assert not (dest / "alias.sh").is_symlink()
    assert (dest / "alias.sh").read_text() == "echo real\n"


def test_file_symlink_escape_rejected(tmp_path: Path) -> None:
    secret = write_tree(tmp_path / "outside", {"secret": "s3cr3t"}) / "secret"
    src = write_tree(tmp_path / "src", {"a.sh": "echo\n"})
    (src / "leak").symlink_to(secret)
    with pytest.raises(LifecycleSourceError, match="outside the source directory"):
        fetch(f"file://{src}", tmp_path)
    assert not (tmp_path / "dest" / "leak").exists()


def test_file_symlinked_directory_rejected(tmp_path: Path) -> None:
    write_tree(tmp_path / "outside", {"x": "x"})
    src = write_tree(tmp_path / "src", {"a.sh": "echo\n"})
    (src / "etc").symlink_to(tmp_path / "outside")
    with pytest.raises(LifecycleSourceError, match="symlinked directory"):
        fetch(f"file://{src}", tmp_path)


def test_file_fifo_rejected(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"a.sh": "echo\n"})
    os.mkfifo(src / "pipe")
    with pytest.raises(LifecycleSourceError, match="not a regular file"):
        fetch(f"file://{src}", tmp_path)


def test_size_cap(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"a.bin": b"x" * 600, "b.bin": b"y" * 600})
    with pytest.raises(LifecycleSourceError, match="larger than the limit of 1000 bytes"):
        fetch(f"file://{src}", tmp_path, limits=SourceLimits(max_bytes=1000))


def test_file_count_cap(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {f"f{i}": "x" for i in range(6)})
    with pytest.raises(LifecycleSourceError, match="more than the limit of 5 files"):
        fetch(f"file://{src}", tmp_path, limits=SourceLimits(max_files=5))


# --- https:// ------------------------------------------------------------------------------------------


def make_tar_gz(members: dict[str, bytes], *, mode: int = 0o755) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_http_tar_gz(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    (root / "lcc.tar.gz").write_bytes(
        make_tar_gz({"./on_create.sh": b"#!/bin/bash\necho hi\n", "lib/x.py": b"pass\n"})
    )
    dest, files = fetch(f"{base}/lcc.tar.gz", tmp_path)
    assert files == ["lib/x.py", "on_create.sh"]
    assert (dest / "on_create.sh").read_bytes() == b"#!/bin/bash\necho hi\n"
    assert os.stat(dest / "on_create.sh").st_mode & 0o100


def test_http_zip_and_single_file(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    (root / "lcc.zip").write_bytes(make_zip({"a/b.sh": b"echo b\n"}))
    (root / "one.sh").write_bytes(b"echo one\n")
    dest, files = fetch(f"{base}/lcc.zip", tmp_path)
    assert files == ["a/b.sh"]
    dest2 = tmp_path / "dest2"
    dest2.mkdir()
    assert fetch_source(f"{base}/one.sh", dest2) == ["one.sh"]
    assert (dest2 / "one.sh").read_bytes() == b"echo one\n"


def test_http_errors(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    with pytest.raises(LifecycleSourceError, match="HTTP 404"):
        fetch(f"{base}/missing.tar.gz", tmp_path)
    with pytest.raises(LifecycleSourceError, match="directory"):
        fetch(f"{base}/", tmp_path)


def test_http_download_cap(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    (root / "big.sh").write_bytes(b"x" * 5000)
    with pytest.raises(LifecycleSourceError, match="larger than the limit"):
        fetch(f"{base}/big.sh", tmp_path, limits=SourceLimits(max_bytes=4096))


def test_http_unreachable_is_retryable(tmp_path: Path) -> None:
    with pytest.raises(LifecycleSourceError) as info:
        fetch("http://127.0.0.1:1/x.sh", tmp_path, timeout=2)
    assert info.value.retryable


@pytest.mark.parametrize("name", ["../evil.sh", "/etc/evil.sh", "a/../../evil.sh"])
def test_tar_traversal_rejected(tmp_path: Path, http_root: tuple[Path, str], name: str) -> None:
    root, base = http_root
    (root / "bad.tar.gz").write_bytes(make_tar_gz({"ok.sh": b"echo\n", name: b"pwned\n"}))
    with pytest.raises(LifecycleSourceError):
        fetch(f"{base}/bad.tar.gz", tmp_path)
    assert not (tmp_path / "evil.sh").exists()
    assert not Path("/etc/evil.sh").exists()


def test_tar_links_rejected(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        link = tarfile.TarInfo("passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tar.addfile(link)
    (root / "link.tar.gz").write_bytes(buf.getvalue())
    with pytest.raises(LifecycleSourceError, match="not a regular file"):
        fetch(f"{base}/link.tar.gz", tmp_path)


def test_tar_decompressed_size_cap(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    (root / "bomb.tar.gz").write_bytes(make_tar_gz({"zeros": b"\0" * 200_000}))
    assert len((root / "bomb.tar.gz").read_bytes()) < 10_000
    with pytest.raises(LifecycleSourceError, match="larger than the limit"):
        fetch(f"{base}/bomb.tar.gz", tmp_path, limits=SourceLimits(max_bytes=10_000))


def test_zip_traversal_and_garbage_rejected(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    (root / "bad.zip").write_bytes(make_zip({"../evil.sh": b"x"}))
    (root / "garbage.tar.gz").write_bytes(b"not an archive at all")
    with pytest.raises(LifecycleSourceError, match="escapes"):
        fetch(f"{base}/bad.zip", tmp_path)
    dest = tmp_path / "d2"
    dest.mkdir()
    with pytest.raises(LifecycleSourceError, match="not a valid tar"):
        fetch_source(f"{base}/garbage.tar.gz", dest)


def test_duplicate_entries_rejected(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    (root / "dup.tar.gz").write_bytes(make_tar_gz({"a.sh": b"1", "./a.sh": b"2"}))
    with pytest.raises(LifecycleSourceError, match="duplicate"):
        fetch(f"{base}/dup.tar.gz", tmp_path)


# --- s3:// ---------------------------------------------------------------------------------------------


def s3_client():
    return boto3.client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        endpoint_url="http://127.0.0.1:9",
    )


def body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


def listing(prefix: str, objects: dict[str, bytes], **extra) -> dict:
    return {
        "Contents": [{"Key": k, "Size": len(v)} for k, v in objects.items()],
        "IsTruncated": False,
        "KeyCount": len(objects),
        "Prefix": prefix,
        **extra,
    }


def test_s3_prefix(tmp_path: Path) -> None:
    client = s3_client()
    objects = {"lcc/on_create.sh": b"echo s3\n", "lcc/lib/x.py": b"pass\n"}
    with Stubber(client) as stub:
        stub.add_response(
            "list_objects_v2",
            listing("lcc/", {"lcc/": b"", **objects}),
            {"Bucket": "sagemaker-bucket", "Prefix": "lcc/"},
        )
        for key, data in [("lcc/on_create.sh", objects["lcc/on_create.sh"]), ("lcc/lib/x.py", b"pass\n")]:
            stub.add_response("get_object", {"Body": body(data)}, {"Bucket": "sagemaker-bucket", "Key": key})
        dest, files = fetch("s3://sagemaker-bucket/lcc", tmp_path, s3_client=client)
        stub.assert_no_pending_responses()
    assert files == ["lib/x.py", "on_create.sh"]
    assert (dest / "on_create.sh").read_bytes() == b"echo s3\n"


def test_s3_paging(tmp_path: Path) -> None:
    client = s3_client()
    with Stubber(client) as stub:
        stub.add_response(
            "list_objects_v2",
            {**listing("p/", {"p/a": b"a"}), "IsTruncated": True, "NextContinuationToken": "t1"},
            {"Bucket": "b", "Prefix": "p/"},
        )
        stub.add_response(
            "list_objects_v2",
            listing("p/", {"p/b": b"b"}),
            {"Bucket": "b", "Prefix": "p/", "ContinuationToken": "t1"},
        )
        stub.add_response("get_object", {"Body": body(b"a")}, {"Bucket": "b", "Key": "p/a"})
        stub.add_response("get_object", {"Body": body(b"b")}, {"Bucket": "b", "Key": "p/b"})
        _, files = fetch("s3://b/p/", tmp_path, s3_client=client)
    assert files == ["a", "b"]


def test_s3_single_object_fallback(tmp_path: Path) -> None:
    client = s3_client()
    with Stubber(client) as stub:
        stub.add_response(
            "list_objects_v2", listing("x/setup.sh/", {}), {"Bucket": "b", "Prefix": "x/setup.sh/"}
        )
        stub.add_response("head_object", {"ContentLength": 4}, {"Bucket": "b", "Key": "x/setup.sh"})
        stub.add_response("get_object", {"Body": body(b"echo")}, {"Bucket": "b", "Key": "x/setup.sh"})
        dest, files = fetch("s3://b/x/setup.sh", tmp_path, s3_client=client)
    assert files == ["setup.sh"]


def test_s3_key_escaping_prefix_rejected(tmp_path: Path) -> None:
    client = s3_client()
    with Stubber(client) as stub:
        stub.add_response(
            "list_objects_v2",
            listing("lcc/", {"lcc/../../etc/cron.d/x": b"x"}),
            {"Bucket": "b", "Prefix": "lcc/"},
        )
        stub.add_response(
            "get_object", {"Body": body(b"x")}, {"Bucket": "b", "Key": "lcc/../../etc/cron.d/x"}
        )
        with pytest.raises(LifecycleSourceError, match="escapes"):
            fetch("s3://b/lcc", tmp_path, s3_client=client)
    assert files_under(tmp_path / "dest") == []


def test_s3_size_cap_from_listing(tmp_path: Path) -> None:
    client = s3_client()
    with Stubber(client) as stub:
        stub.add_response(
            "list_objects_v2", listing("p/", {"p/big": b"x" * 2048}), {"Bucket": "b", "Prefix": "p/"}
        )
        with pytest.raises(LifecycleSourceError, match="larger than the limit"):
            fetch("s3://b/p", tmp_path, s3_client=client, limits=SourceLimits(max_bytes=1024))


def test_s3_client_error(tmp_path: Path) -> None:
    client = s3_client()
    with Stubber(client) as stub:
        stub.add_client_error(
            "list_objects_v2", service_error_code="NoSuchBucket", service_message="The bucket does not exist"
        )
        with pytest.raises(LifecycleSourceError, match="NoSuchBucket: The bucket does not exist") as info:
            fetch("s3://nope/p", tmp_path, s3_client=client)
    assert not info.value.retryable


def test_zip_symlink_rejected(tmp_path: Path, http_root: tuple[Path, str]) -> None:
    root, base = http_root
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("passwd")
        info.create_system = 3
        info.external_attr = (0o120777) << 16
        zf.writestr(info, "/etc/passwd")
    (root / "link.zip").write_bytes(buf.getvalue())
    with pytest.raises(LifecycleSourceError, match="not a regular file"):
        fetch(f"{base}/link.zip", tmp_path)


def test_file_roots_confine_file_sources(tmp_path: Path) -> None:
    allowed = write_tree(tmp_path / "allowed", {"ok/a.sh": "echo\n"})
    other = write_tree(tmp_path / "other", {"a.sh": "echo\n"})
    _, files = fetch(f"file://{allowed}/ok", tmp_path, file_roots=[allowed])
    assert files == ["a.sh"]
    with pytest.raises(LifecycleSourceError, match="not allowed"):
        fetch(f"file://{other}", tmp_path, file_roots=[allowed])
    with pytest.raises(LifecycleSourceError, match="not allowed"):
        fetch(f"file://{allowed}/ok", tmp_path, file_roots=[])
    (allowed / "escape").symlink_to(other)
    with pytest.raises(LifecycleSourceError, match="not allowed"):
        fetch(f"file://{allowed}/escape", tmp_path, file_roots=[allowed])


class _Redirect(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", "ftp://127.0.0.1/x.sh" if "ftp" in self.path else "/real.sh")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_redirect_to_non_http_rejected(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with pytest.raises(LifecycleSourceError, match="redirected to an unsupported URL"):
            fetch(f"http://127.0.0.1:{server.server_address[1]}/ftp.sh", tmp_path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_make_s3_client_path_style_and_anonymous(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurmpod.lifecycle.sources import S3Options, make_s3_client

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    anon = make_s3_client(S3Options(endpoint_url="http://127.0.0.1:9000"))
    assert anon.meta.endpoint_url == "http://127.0.0.1:9000"
    assert anon.meta.config.s3["addressing_style"] == "path"
    from botocore import UNSIGNED

    assert anon.meta.config.signature_version is UNSIGNED
    signed = make_s3_client(
        S3Options(endpoint_url="http://127.0.0.1:9000", aws_access_key_id="k", aws_secret_access_key="s")
    )
    assert signed.meta.config.signature_version is not UNSIGNED
