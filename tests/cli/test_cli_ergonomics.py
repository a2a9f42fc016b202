"""The ``slurmpod`` command line: options anywhere, ``--version``, SLURMPOD_STATE_DIR / SLURMPOD_DB everywhere,
examples in every ``--help``, regions for tools that take a cluster name, and ``slurmpod audit``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpod import __version__
from slurmpod.cli import build_parser, main
from slurmpod.cli.common import _children
from slurmpod.cli.options import find_clusters, one_cluster
from slurmpod.regions import REGION_SETTING
from slurmpod.store.sql import SqlStore
from tests.store.test_store import make_cluster


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURMPOD_")}
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", *argv], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=60, check=False)


def test_options_anywhere_and_environment(tmp_path: Path) -> None:
    state = tmp_path / "s"
    assert main(["capacity", "set", "ml.c5.xlarge=1", "--state-dir", str(state)]) == 0
    assert main(["--state-dir", str(state), "capacity", "set", "ml.p5.48xlarge=2"]) == 0
    assert main(["capacity", "--state-dir", str(state), "unset", "ml.p5.48xlarge"]) == 0
    shown = _run("capacity", "show", env={"SLURMPOD_STATE_DIR": str(state)})
    assert shown.returncode == 0 and shown.stdout == "ml.c5.xlarge=1\n"
    db = f"sqlite:///{tmp_path / 'other.db'}"
    assert _run("capacity", "set", "ml.g5.xlarge=3", env={"SLURMPOD_DB": db}).returncode == 0
    assert _run("capacity", "show", "--db", db).stdout == "ml.g5.xlarge=3\n"
    assert _run("capacity", "show", "--state-dir", str(state), env={"SLURMPOD_DB": db}).stdout == "ml.g5.xlarge=3\n"


def test_version_and_examples_in_every_help() -> None:
    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"slurmpod {__version__}"

    def walk(p: argparse.ArgumentParser, path: str) -> list[str]:
        missing = [] if (p.epilog or "").startswith("examples:") else [path or "slurmpod"]
        for name, child in _children(p):
            missing += walk(child, f"{path} {name}".strip())
        return missing

    assert walk(build_parser(), "") == []
    helped = _run("capacity", "set", "--help")
    assert "examples:\n  slurmpod capacity set ml.c5.xlarge=1" in helped.stdout and "--state-dir" in helped.stdout


def test_cluster_names_resolve_in_a_region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURMPOD_REGION", raising=False)
    store = SqlStore(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        west = make_cluster("abcdefghij01", "alpha")  # us-west-2 (the store tests' region)
        from dataclasses import replace

        tokyo = replace(make_cluster("abcdefghij02", "alpha"), region="ap-northeast-1",
                        arn="arn:aws:sagemaker:ap-northeast-1:123456789012:cluster/abcdefghij02")
        store.create_cluster(west)
        store.create_cluster(tokyo)
        assert find_clusters(store, "alpha", None) == []  # default region us-east-1: neither
        store.put_setting(REGION_SETTING, "ap-northeast-1")  # what a server started with --region writes
        assert one_cluster(store, "alpha", None).cluster_id == "abcdefghij02"
        assert one_cluster(store, "alpha", "us-west-2").cluster_id == "abcdefghij01"
        assert one_cluster(store, west.arn, "eu-west-1").cluster_id == "abcdefghij01"  # an ARN names one anywhere
        monkeypatch.setenv("SLURMPOD_REGION", "us-west-2")
        assert one_cluster(store, "alpha", None).cluster_id == "abcdefghij01"
        with pytest.raises(LookupError, match="no cluster alpha in region eu-west-1"):
            one_cluster(store, "alpha", "eu-west-1")
    finally:
        store.close()


def test_server_refuses_a_region_of_another_shape(tmp_path: Path) -> None:
    out = _run("server", "--region", "moon-1", "--state-dir", str(tmp_path / "s"), "--provider", "simulated")
    assert out.returncode == 2 and "not an AWS region name" in out.stderr
