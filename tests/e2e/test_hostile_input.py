"""Hostile input: oversized, deep and huge bodies, odd characters in names, escaping lifecycle sources.

Every answer is a 4xx with ``{"__type", "message"}`` (never a 5xx), rejected requests change nothing, and
nothing is written outside the state directory. Lifecycle sources are tested on ``snapshot_source``
directly and, with root and Slurm installed, through a ``--provider local`` server (no node is launched:
sources are snapshotted when CreateCluster is accepted).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from slurmpod.api.protocol import MAX_BODY_BYTES
from slurmpod.lifecycle.snapshot import snapshot_source
from slurmpod.lifecycle.sources import LifecycleSourceError, SourceLimits
from slurmpod.settings import Settings
from tests.serverproc import RunningServer, ServerProcess, free_port, seed_groups, thread_server, unsigned

SM = "SageMaker."
LIST_HEADERS = {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": SM + "ListClusters"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    state = Path(tmp_path_factory.mktemp("hostile")) / "state"
    cfg = Settings(state_dir=state, port=free_port(), provider="simulated", reconcile_interval=0.2,
                   simulated_launch_delay=0.0)
    with thread_server(cfg) as server:
        yield server


def _error(resp: requests.Response, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text[:500]
    body = resp.json()
    assert set(body) == {"__type", "message"} and body["__type"] == code, str(body)[:500]
    return str(body["message"])


def _no_clusters(server: RunningServer) -> None:
    assert server.client().list_clusters()["ClusterSummaries"] == []


# ---- size and shape ---------------------------------------------------------------------------------------------


def test_body_over_the_limit(srv: RunningServer) -> None:
    big = b'{"ClusterName": "' + b"x" * MAX_BODY_BYTES + b'"}'
    msg = _error(srv.raw(SM + "CreateCluster", big), 413, "RequestEntityTooLargeException")
    assert f"exceeds the limit of {MAX_BODY_BYTES} bytes" in msg
    # unsigned, huge (50 MiB): refused from Content-Length alone, quickly
    started = time.monotonic()
    with unsigned():
        resp = requests.post(srv.endpoint + "/", data=b"x" * (50 * 1024 * 1024), timeout=30,
                             headers=LIST_HEADERS)
    _error(resp, 413, "RequestEntityTooLargeException")
    assert time.monotonic() - started < 10

    # chunked (no Content-Length): counted while streaming
    def chunks() -> Iterator[bytes]:
        for _ in range(200):
            yield b"x" * 8192

    with unsigned():
        resp = requests.post(srv.endpoint + "/", data=chunks(), timeout=30,
                             headers=LIST_HEADERS)
    _error(resp, 413, "RequestEntityTooLargeException")
    _no_clusters(srv)


@pytest.mark.parametrize("body", [
    b"[" * 10_000 + b"]" * 10_000,
    b'{"ClusterName": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_001,
    b'{"InstanceGroups": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}",
])
def test_deeply_nested_json(srv: RunningServer, body: bytes) -> None:
    msg = _error(srv.raw(SM + "CreateCluster", body), 400, "SerializationException")
    assert msg == "Request body is nested too deeply."


def test_very_large_arrays(srv: RunningServer) -> None:
    started = time.monotonic()
    ids = ["i-0123456789abcdef0"] * 40_000
    msg = _error(srv.raw(SM + "BatchDeleteClusterNodes", {"ClusterName": "x", "NodeIds": ids}), 400,
                 "ValidationException")
    assert "at 'nodeIds' failed to satisfy constraint: Member must have length less than or equal to" in msg
    groups = [seed_groups(1)[1]] * 3_000
    msg = _error(srv.raw(SM + "CreateCluster", {"ClusterName": "big", "InstanceGroups": groups}), 400,
                 "ValidationException")
    assert "instanceGroups" in msg
    tags = [{"Key": f"k{i}", "Value": "v"} for i in range(20_000)]
    _error(srv.raw(SM + "CreateCluster", {"ClusterName": "tags", "InstanceGroups": seed_groups(1), "Tags": tags}),
           400, "ValidationException")
    assert time.monotonic() - started < 20
    _no_clusters(srv)


NAMES = ["clu\x00ster", "a\nb", "tab\there", "cl\u00fcster", "a\u202eb", "\U0001f600", "\ufeffname", "x\u200by",
         "\ud800", "..", "../../etc/passwd", "a/b", "-a", "a" * 64]


@pytest.mark.parametrize("name", NAMES)
def test_odd_cluster_names(srv: RunningServer, name: str) -> None:
    body = json.dumps({"ClusterName": name, "InstanceGroups": seed_groups(1)})
    msg = _error(srv.raw(SM + "CreateCluster", body), 400, "ValidationException")
    assert msg.startswith("1 validation error detected: Value '")
    assert "at 'clusterName' failed to satisfy constraint" in msg
    for op in ("DescribeCluster", "DeleteCluster", "ListClusterNodes"):
        _error(srv.raw(SM + op, json.dumps({"ClusterName": name})), 400, "ValidationException")
    _no_clusters(srv)


@pytest.mark.parametrize("name", ["gr\x07oup", "gr\u00f6up", "g\U0001f600", "g\nroup"])
def test_odd_group_and_partition_names(srv: RunningServer, name: str) -> None:
    ctl, cmp = seed_groups(1)
    msg = _error(srv.raw(SM + "CreateCluster", {"ClusterName": "g", "InstanceGroups": [ctl, {**cmp,
                 "InstanceGroupName": name}]}), 400, "ValidationException")
    assert "instanceGroups.2.member.instanceGroupName" in msg
    slurm = {"NodeType": "Compute", "PartitionNames": [name]}
    resp = srv.raw(SM + "CreateCluster", {"ClusterName": "g", "InstanceGroups": [ctl, {**cmp, "SlurmConfig": slurm}]})
    _error(resp, 400, "ValidationException")
    _no_clusters(srv)


def test_invalid_utf8_and_lone_surrogates(srv: RunningServer) -> None:
    _error(srv.raw(SM + "CreateCluster", b'{"ClusterName": "\xff\xfe"}'), 400, "SerializationException")
    msg = _error(srv.raw(SM + "DescribeCluster", b'{"ClusterName": "\\udc00"}'), 400, "ValidationException")
    assert "clusterName" in msg


# ---- lifecycle sources: snapshot_source directly ----------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def _fingerprint(root: Path) -> set[tuple[str, int]]:
    return {(str(p.relative_to(root)), p.lstat().st_size) for p in root.rglob("*")}


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    state = tmp_path / "state"
    (state / "lifecycle").mkdir(parents=True)
    allowed = _tree(tmp_path / "sources", {"good/on_create.sh": "echo ok\n"})
    outside = _tree(tmp_path / "outside", {"secret": "s3cr3t", "dir/x.sh": "echo x\n"})
    return {"state": state, "snapshots": state / "lifecycle", "allowed": allowed, "outside": outside}


def _reject(layout: dict[str, Path], uri: str, match: str, **kw: Any) -> None:
    before = _fingerprint(layout["outside"])
    with pytest.raises(LifecycleSourceError, match=match):
        snapshot_source(uri, layout["snapshots"], file_roots=[layout["allowed"]], **kw)
    assert list(layout["snapshots"].iterdir()) == []  # no snapshot, no temp dir left
    assert _fingerprint(layout["outside"]) == before  # nothing written outside


def test_snapshot_dotdot_traversal_rejected(layout: dict[str, Path]) -> None:
    _reject(layout, f"file://{layout['allowed']}/good/../../outside", "not allowed")
    _reject(layout, f"file://{layout['allowed']}/%2e%2e/outside/dir", "not allowed")


def test_snapshot_symlink_escape_rejected(layout: dict[str, Path]) -> None:
    good = layout["allowed"] / "good"
    (good / "leak").symlink_to(layout["outside"] / "secret")
    _reject(layout, f"file://{good}", "symlink pointing outside the source directory")
    (good / "leak").unlink()
    (good / "sub").symlink_to(layout["outside"] / "dir")
    _reject(layout, f"file://{good}", "symlinked directory")
    (good / "sub").unlink()
    (layout["allowed"] / "hop").symlink_to(layout["outside"])
    _reject(layout, f"file://{layout['allowed']}/hop", "not allowed")


def test_snapshot_huge_script_rejected(layout: dict[str, Path]) -> None:
    good = layout["allowed"] / "good"
    (good / "huge.sh").write_bytes(b"#" * 4096)
    _reject(layout, f"file://{good}", "larger than the limit", limits=SourceLimits(max_bytes=1024))


def test_snapshot_good_source_stays_inside(layout: dict[str, Path]) -> None:
    snap = snapshot_source(f"file://{layout['allowed']}/good", layout["snapshots"], file_roots=[layout["allowed"]])
    assert snap.files == ("on_create.sh",)
    assert layout["snapshots"] in snap.path.parents


# ---- lifecycle sources through a real (local provider) server --------------------------------------------------


def _local_ok() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("slurmctld", "slurmd", "munged", "nsenter", "unshare", "ip"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} not installed"
    return None


@pytest.fixture
def local_server(tmp_path: Path) -> Iterator[ServerProcess]:
    reason = _local_ok()
    if reason:
        pytest.skip(reason)
    state = tmp_path / "lp"
    server = ServerProcess(state, free_port(), "--provider", "local")
    try:
        server.start()
        yield server
    finally:
        server.stop()
        from slurmpod.providers.local.cleanup import cleanup, find_leftovers

        if find_leftovers(state):
            cleanup(state)


def _outside_state(tmp_path: Path) -> set[tuple[str, int]]:
    return {(p, size) for p, size in _fingerprint(tmp_path) if p != "lp" and not p.startswith("lp/")}


def _create_with_source(server: ServerProcess, uri: str) -> requests.Response:
    lcc = {"SourceS3Uri": uri, "OnCreate": "on_create.sh"}
    groups = [{**g, "LifeCycleConfig": lcc} for g in seed_groups(1)]
    body = {"ClusterName": "hostile", "InstanceGroups": groups}
    return requests.post(server.endpoint + "/", data=json.dumps(body), timeout=60,
                         headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": SM + "CreateCluster"})


def test_local_server_rejects_escaping_sources(local_server: ServerProcess, tmp_path: Path) -> None:
    state = local_server.state_dir
    src = _tree(tmp_path / "src", {"on_create.sh": "#!/bin/bash\necho ok\n"})
    outside = _tree(tmp_path / "outside", {"secret": "s3cr3t"})
    (src / "leak").symlink_to(outside / "secret")
    before = _outside_state(tmp_path)
    cases = [
        (f"file://{src}", "symlink pointing outside the source directory"),
        # the credential store (or anything else in the state dir) may not be read, with or without ../
        (f"file://{state}/auth/credentials.json", "may not read slurmpod's state directory"),
        (f"file://{src}/../../{tmp_path.name}/lp/auth", "may not read slurmpod's state directory"),
        (f"file://{state}/lifecycle/../auth", "may not read slurmpod's state directory"),
        (f"file://{tmp_path}", "may not read slurmpod's state directory"),  # a parent of the state dir
    ]
    for uri, fragment in cases:
        resp = _create_with_source(local_server, uri)
        assert resp.status_code == 400, resp.text
        body = resp.json()
        assert body["__type"] == "ValidationException" and fragment in body["message"], (uri, body)
    assert _outside_state(tmp_path) == before  # nothing written outside the state dir
    snapshots = state / "lifecycle"
    assert not snapshots.exists() or not [p for p in snapshots.iterdir() if p.name.startswith(".")]
    assert local_server.client().list_clusters()["ClusterSummaries"] == []
