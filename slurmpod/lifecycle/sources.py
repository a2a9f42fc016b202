"""Fetch every file under a lifecycle ``SourceS3Uri`` into a fresh local directory.

Supported sources:

* ``file:///abs/dir`` or ``file:///abs/file`` (slurmpod extension; a directory tree or one file);
* ``s3://bucket/prefix`` through boto3 (any S3-compatible endpoint, e.g. MinIO); the prefix names a
  "folder" (``prefix/…``); if that folder is empty the URI may name a single object;
* ``https://host/path`` (and ``http://``): one file, or a ``.tar.gz``/``.tgz``/``.tar``/``.zip`` archive
  which is unpacked.

Everything here treats the source as hostile: entry names are validated (no ``..``, no absolute
names, no collisions), symlinks may not escape a ``file://`` source, archives may contain only regular
files and directories, and the total size and file count are capped (``SourceLimits``). Every problem
is a ``LifecycleSourceError`` with a message fit for a user. Nothing is written outside ``dest``.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

CHUNK = 64 * 1024


class LifecycleSourceError(Exception):
    """The lifecycle source cannot be used; ``message`` is safe to show to the API client.

    ``retryable`` is True when the failure may be transient (network, endpoint unreachable).
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class SourceLimits:
    max_bytes: int = 64 * 1024 * 1024
    max_files: int = 2000


DEFAULT_LIMITS = SourceLimits()


@dataclass(frozen=True)
class S3Options:
    """How to reach an S3-compatible store. Unset credentials fall back to boto3's chain, then anonymous."""

    endpoint_url: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    region_name: str | None = None


def safe_relpath(name: str) -> str:
    """Validates an entry name from a source and returns it normalised (``a/./b//c`` → ``a/b/c``).

    Rejects empty names, absolute names, ``..`` components, backslashes and control characters.
    """
    if not name or name.startswith("/"):
        raise LifecycleSourceError(f"Lifecycle source entry {name!r} is not a relative path")
    if "\\" in name or any(ord(c) < 32 for c in name):
        raise LifecycleSourceError(f"Lifecycle source entry {name!r} contains forbidden characters")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise LifecycleSourceError(f"Lifecycle source entry {name!r} escapes the source directory (..)")
    if not parts:
        raise LifecycleSourceError(f"Lifecycle source entry {name!r} names no file")
    return "/".join(parts)


class _Sink:
    """Writes validated files under ``dest`` and enforces the limits across the whole source."""

    def __init__(self, dest: Path, limits: SourceLimits) -> None:
        self.dest = dest
        self.limits = limits
        self.total = 0
        self.files: list[str] = []

    def charge(self, nbytes: int) -> None:
        self.total += nbytes
        if self.total > self.limits.max_bytes:
            raise LifecycleSourceError(
                f"Lifecycle source is larger than the limit of {self.limits.max_bytes} bytes"
            )

    def add(self, name: str, chunks: Iterable[bytes], executable: bool) -> str:
        rel = safe_relpath(name)
        if len(self.files) >= self.limits.max_files:
            raise LifecycleSourceError(
                f"Lifecycle source has more than the limit of {self.limits.max_files} files"
            )
        parent = self.dest
        parts = rel.split("/")
        try:
            for part in parts[:-1]:
                parent = parent / part
                if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                    raise LifecycleSourceError(f"Lifecycle source entry {name!r} conflicts with a file")
                parent.mkdir(mode=0o755, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(parent / parts[-1], flags, 0o755 if executable else 0o644)
        except FileExistsError:
            raise LifecycleSourceError(f"Lifecycle source has a duplicate entry {rel!r}") from None
        except NotADirectoryError:
            raise LifecycleSourceError(f"Lifecycle source entry {name!r} conflicts with a file") from None
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                self.charge(len(chunk))
                out.write(chunk)
        os.chmod(parent / parts[-1], 0o755 if executable else 0o644)  # umask-proof
        self.files.append(rel)
        return rel


def _read_chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK):
        yield chunk


def fetch_source(
    uri: str,
    dest: Path,
    *,
    s3: S3Options | None = None,
    s3_client: Any = None,
    limits: SourceLimits = DEFAULT_LIMITS,
    timeout: float = 30.0,
    file_roots: Sequence[Path] | None = None,
) -> list[str]:
    """Fetches every file under ``uri`` into the existing empty directory ``dest``.

    Returns the sorted relative paths written. ``s3_client`` (a botocore S3 client) overrides the
    client built from ``s3``; tests inject a stubbed one. ``file_roots``, when given, confines
    ``file://`` sources to those directories (an empty sequence forbids ``file://`` altogether).
    """
    parsed = urllib.parse.urlsplit(uri)
    sink = _Sink(dest, limits)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        _fetch_file(parsed, sink, file_roots)
    elif scheme == "s3":
        _fetch_s3(parsed, sink, s3 or S3Options(), s3_client)
    elif scheme in ("https", "http"):
        _fetch_http(uri, parsed, sink, timeout)
    else:
        raise LifecycleSourceError(
            f"Unsupported lifecycle source {uri!r}: use s3://bucket/prefix, https://… or file:///path"
        )
    if not sink.files:
        raise LifecycleSourceError(f"No lifecycle script files found under {uri}")
    return sorted(sink.files)


# --- file:// -----------------------------------------------------------------------------------------


def _fetch_file(parsed: urllib.parse.SplitResult, sink: _Sink, roots: Sequence[Path] | None) -> None:
    if parsed.netloc not in ("", "localhost"):
        raise LifecycleSourceError(f"file:// lifecycle source must be local, not on host {parsed.netloc!r}")
    raw = urllib.parse.unquote(parsed.path)
    if not raw.startswith("/"):
        raise LifecycleSourceError("file:// lifecycle source needs an absolute path (file:///dir)")
    root = Path(raw)
    if not root.exists():
        raise LifecycleSourceError(f"Lifecycle source {raw} does not exist")
    real_root = Path(os.path.realpath(root))
    if roots is not None and not any(_within(real_root, Path(os.path.realpath(r))) for r in roots):
        raise LifecycleSourceError(f"file:// lifecycle sources are not allowed from {raw} on this server")
    if real_root.is_file():
        _copy_local(real_root, real_root.name, sink)
        return
    if not real_root.is_dir():
        raise LifecycleSourceError(f"Lifecycle source {raw} is neither a file nor a directory")
    for dirpath, dirnames, filenames in os.walk(real_root, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        for d in dirnames:
            if (here / d).is_symlink():
                raise LifecycleSourceError(
                    f"Lifecycle source {raw} contains a symlinked directory "
                    f"{(here / d).relative_to(real_root)}, which is not supported"
                )
        for f in sorted(filenames):
            path = here / f
            rel = path.relative_to(real_root).as_posix()
            target = Path(os.path.realpath(path))
            if not _within(target, real_root):
                raise LifecycleSourceError(
                    f"Lifecycle source entry {rel!r} is a symlink pointing outside the source directory"
                )
            _copy_local(target, rel, sink)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _copy_local(path: Path, rel: str, sink: _Sink) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise LifecycleSourceError(f"Cannot read lifecycle source entry {rel!r}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise LifecycleSourceError(f"Lifecycle source entry {rel!r} is not a regular file")
        sink.add(rel, _read_chunks(f), bool(st.st_mode & stat.S_IXUSR))


# --- s3:// -------------------------------------------------------------------------------------------


def make_s3_client(options: S3Options) -> Any:
    """A boto3 S3 client for ``options``; anonymous (unsigned) when no credentials can be found."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=options.aws_access_key_id,
        aws_secret_access_key=options.aws_secret_access_key,
        aws_session_token=options.aws_session_token,
        region_name=options.region_name or "us-east-1",
    )
    extra: dict[str, Any] = {"connect_timeout": 10, "read_timeout": 30, "retries": {"max_attempts": 3}}
    if options.endpoint_url:
        extra["s3"] = {"addressing_style": "path"}
    if session.get_credentials() is None:
        extra["signature_version"] = UNSIGNED
    return session.client("s3", endpoint_url=options.endpoint_url, config=Config(**extra))


def _fetch_s3(parsed: urllib.parse.SplitResult, sink: _Sink, options: S3Options, client: Any) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    bucket = parsed.netloc
    if not bucket:
        raise LifecycleSourceError("s3:// lifecycle source needs a bucket (s3://bucket/prefix)")
    key = urllib.parse.unquote(parsed.path).lstrip("/")
    folder = key.rstrip("/") + "/" if key.rstrip("/") else ""
    uri = f"s3://{bucket}/{key}"
    if client is None:
        client = make_s3_client(options)
    try:
        objects = _list_s3(client, bucket, folder, sink.limits)
        if not objects and key and not key.endswith("/"):
            head = client.head_object(Bucket=bucket, Key=key)
            objects = [(key, int(head.get("ContentLength", 0)))]
            folder = key[: key.rfind("/") + 1]
        declared = sum(size for _, size in objects)
        if declared > sink.limits.max_bytes:
            raise LifecycleSourceError(
                f"Lifecycle source {uri} is larger than the limit of {sink.limits.max_bytes} bytes"
            )
        for obj_key, _size in objects:
            rel = obj_key[len(folder) :]
            body = client.get_object(Bucket=bucket, Key=obj_key)["Body"]
            try:
                sink.add(rel, _read_chunks(body), executable=False)
            finally:
                body.close()
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "Error")
        raise LifecycleSourceError(
            f"Cannot read lifecycle source {uri}: {code}: {err.get('Message') or exc}",
            retryable=code in ("SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"),
        ) from None
    except BotoCoreError as exc:
        raise LifecycleSourceError(f"Cannot read lifecycle source {uri}: {exc}", retryable=True) from None


def _list_s3(client: Any, bucket: str, folder: str, limits: SourceLimits) -> list[tuple[str, int]]:
    objects: list[tuple[str, int]] = []
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": folder}
    while True:
        page = client.list_objects_v2(**kwargs)
        for obj in page.get("Contents", []):
            k = obj["Key"]
            if k.endswith("/"):  # "folder" marker objects made by consoles
                continue
            if not k.startswith(folder):
                raise LifecycleSourceError(f"S3 listing returned key {k!r} outside prefix {folder!r}")
            objects.append((k, int(obj.get("Size", 0))))
            if len(objects) > limits.max_files:
                raise LifecycleSourceError(
                    f"Lifecycle source s3://{bucket}/{folder} has more than the limit of "
                    f"{limits.max_files} files"
                )
        if not page.get("IsTruncated"):
            return objects
        kwargs["ContinuationToken"] = page["NextContinuationToken"]


# --- https:// ----------------------------------------------------------------------------------------

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
ZIP_UNIX = 3  # ZipInfo.create_system of archives made on Unix (mode bits in external_attr)


def _fetch_http(uri: str, parsed: urllib.parse.SplitResult, sink: _Sink, timeout: float) -> None:
    path = urllib.parse.unquote(parsed.path)
    name = path.rsplit("/", 1)[-1]
    if not name:
        raise LifecycleSourceError(
            f"https lifecycle source {uri} must name a file or a .tar.gz/.zip archive, not a directory"
        )
    data = _download(uri, sink.limits.max_bytes, timeout)
    lower = name.lower()
    if lower.endswith(".zip"):
        _unpack_zip(data, sink)
    elif lower.endswith(ARCHIVE_SUFFIXES):
        _unpack_tar(data, sink)
    else:
        sink.add(name, [data], executable=data.startswith(b"#!"))


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects only to http(s) URLs (urllib would also follow ftp://)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise LifecycleSourceError(f"Lifecycle source redirected to an unsupported URL {newurl!r}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _download(uri: str, max_bytes: int, timeout: float) -> bytes:
    request = urllib.request.Request(uri, headers={"User-Agent": "slurmpod-lifecycle"})
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    try:
        with opener.open(request, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise LifecycleSourceError(
                    f"Lifecycle source {uri} is larger than the limit of {max_bytes} bytes"
                )
            data = resp.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        raise LifecycleSourceError(
            f"Cannot download lifecycle source {uri}: HTTP {exc.code} {exc.reason}",
            retryable=exc.code >= 500 or exc.code == 429,
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LifecycleSourceError(
            f"Cannot download lifecycle source {uri}: {reason}", retryable=True
        ) from None
    if len(data) > max_bytes:
        raise LifecycleSourceError(f"Lifecycle source {uri} is larger than the limit of {max_bytes} bytes")
    return data


def _unpack_tar(data: bytes, sink: _Sink) -> None:
    max_members = sink.limits.max_files * 4
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for count, member in enumerate(tar, start=1):
                if count > max_members:
                    raise LifecycleSourceError("Lifecycle source archive has too many entries")
                if member.isdir():
                    safe_relpath(member.name)
                    continue
                if not member.isreg():
                    raise LifecycleSourceError(
                        f"Lifecycle source archive entry {member.name!r} is not a regular file "
                        "(links and devices are not allowed)"
                    )
                if member.size > sink.limits.max_bytes - sink.total:
                    raise LifecycleSourceError(
                        f"Lifecycle source is larger than the limit of {sink.limits.max_bytes} bytes"
                    )
                stream = tar.extractfile(member)
                if stream is None:
                    raise LifecycleSourceError(f"Cannot read archive entry {member.name!r}")
                sink.add(member.name, _read_chunks(stream), bool(member.mode & stat.S_IXUSR))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise LifecycleSourceError(f"Lifecycle source archive is not a valid tar archive: {exc}") from None


def _unpack_zip(data: bytes, sink: _Sink) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            if len(infos) > sink.limits.max_files * 4:
                raise LifecycleSourceError("Lifecycle source archive has too many entries")
            if sum(i.file_size for i in infos) > sink.limits.max_bytes:
                raise LifecycleSourceError(
                    f"Lifecycle source is larger than the limit of {sink.limits.max_bytes} bytes"
                )
            for info in infos:
                mode = info.external_attr >> 16 if info.create_system == ZIP_UNIX else 0
                if info.is_dir():
                    safe_relpath(info.filename)
                    continue
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                    raise LifecycleSourceError(
                        f"Lifecycle source archive entry {info.filename!r} is not a regular file "
                        "(links and devices are not allowed)"
                    )
                with zf.open(info) as stream:
                    sink.add(info.filename, _read_chunks(stream), bool(mode & stat.S_IXUSR))
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
        raise LifecycleSourceError(f"Lifecycle source archive is not a valid zip archive: {exc}") from None
