"""The secret store behind AccountingDatabase.SecretArn and `slurmpod secrets`."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpod.security.secrets import SecretError, SecretStore, parse_arn

ACCOUNT = "123456789012"
OTHER = "210987654321"
VALUE = json.dumps({"username": "slurm_acct", "password": "s3cr3t-Pa55"})


def test_create_get_list_delete(tmp_path: Path) -> None:
    store = SecretStore(tmp_path)
    s = store.create("slurm/accounting", VALUE, ACCOUNT, "eu-west-1")
    assert parse_arn(s.arn) is not None
    assert s.arn.startswith(f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT}:secret:slurm/accounting-")
    assert len(s.arn.rsplit("-", 1)[1]) == 6
    assert store.get(s.arn) == s
    # the ARN without Secrets Manager's random suffix names it too
    assert store.get(f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT}:secret:slurm/accounting") == s
    assert [x.name for x in store.list(ACCOUNT)] == ["slurm/accounting"]
    assert "s3cr3t" not in json.dumps([x.summary() for x in store.list()])
    creds = store.database_credentials(s.arn)
    assert (creds.username, creds.password) == ("slurm_acct", "s3cr3t-Pa55")
    assert "s3cr3t" not in repr(creds)
    with pytest.raises(SecretError, match="already exists"):
        store.create("slurm/accounting", VALUE, ACCOUNT, "eu-west-1")
    store.delete(s.arn, ACCOUNT)
    assert store.get(s.arn) is None
    with pytest.raises(SecretError, match="no secret"):
        store.delete("slurm/accounting", ACCOUNT)


def test_files_are_private(tmp_path: Path) -> None:
    store = SecretStore(tmp_path)
    store.create("db", VALUE, ACCOUNT, "us-east-1")
    files = [p for p in (tmp_path / "secrets").rglob("*") if p.is_file() and p.name != ".lock"]
    assert files
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    for d in (tmp_path / "secrets", tmp_path / "secrets" / ACCOUNT):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_database_secret_problems(tmp_path: Path) -> None:
    store = SecretStore(tmp_path)
    good = store.create("db", VALUE, ACCOUNT, "us-east-1")
    bad = store.create("notjson", "hunter2hunter2", ACCOUNT, "us-east-1")
    assert store.database_secret_problem(good.arn, ACCOUNT) is None
    # another account's secret does not exist for the caller
    assert "can't find the specified secret" in (store.database_secret_problem(good.arn, OTHER) or "")
    missing = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:nope-AbCdEf"
    assert "can't find" in (store.database_secret_problem(missing, ACCOUNT) or "")
    problem = store.database_secret_problem(bad.arn, ACCOUNT) or ""
    assert "username" in problem and "hunter2" not in problem


@pytest.mark.parametrize("name", ["", "a b", "x" * 513, "semi;colon"])
def test_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(SecretError):
        SecretStore(tmp_path).create(name, VALUE, ACCOUNT, "us-east-1")


def test_cli_never_prints_the_value(tmp_path: Path) -> None:
    src = tmp_path / "db.json"
    src.write_text(VALUE)
    run = [sys.executable, "-m", "slurmpod.cli", "secrets"]
    env = {**os.environ, "SLURMPOD_ACCOUNT_ID": ACCOUNT}
    out = subprocess.run([*run, "create", "acct-db", "--from-file", str(src), "--state-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=env, check=True)
    arn = json.loads(out.stdout)["ARN"]
    assert "s3cr3t" not in out.stdout + out.stderr
    listed = subprocess.run([*run, "list", "--state-dir", str(tmp_path)], capture_output=True, text=True,
                            timeout=60, env=env, check=True)
    assert json.loads(listed.stdout)[0]["ARN"] == arn and "s3cr3t" not in listed.stdout
    again = subprocess.run([*run, "create", "acct-db", "--from-file", str(src), "--state-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 2 and "already exists" in again.stderr
    gone = subprocess.run([*run, "delete", arn, "--state-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env=env, check=True)
    assert arn in gone.stdout
