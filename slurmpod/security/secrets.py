"""slurmpod's secret store: the Secrets Manager equivalent behind ``AccountingDatabase.SecretArn``.

``slurmpod secrets create NAME --from-file FILE`` stores FILE's content (for a database: the RDS-style JSON
``{"username": "...", "password": "..."}``) as ``<state_dir>/secrets/<account>/<name>.json``, mode 0600 in
0700 directories, written atomically (temp file + fsync + rename) under an exclusive ``flock``, and returns
an ARN shaped like Secrets Manager's: ``arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 chars>``.

Nothing here ever prints, logs or returns a secret's value except ``database_credentials`` (to the code
that writes slurmdbd.conf inside a node). Error messages name the secret, never its content.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurmpod.files import flocked, private_dir, write_atomic

SECRETS_DIR = "secrets"
NAME_RE = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
ACCOUNT_RE = re.compile(r"\d{12}")
ARN_RE = re.compile(
    r"arn:aws[a-z\-]*:secretsmanager:(?P<region>[a-z0-9\-]*):(?P<account>\d{12}):secret:(?P<id>.+)"
)
MAX_VALUE_BYTES = 65536  # Secrets Manager's limit
_SUFFIX_ALPHABET = string.ascii_letters + string.digits


class SecretError(Exception):
    """A bad request to the secret store (message fit for the operator; never holds a secret value)."""


@dataclass(frozen=True)
class Secret:
    arn: str
    name: str
    account_id: str
    created: float
    value: str

    def summary(self) -> dict[str, str]:
        """Secrets Manager's ListSecrets-like entry, without the value."""
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created))
        return {"ARN": self.arn, "Name": self.name, "CreatedDate": created}


@dataclass(frozen=True)
class DatabaseCredentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never show the password, even in a traceback or a debug log
        return f"DatabaseCredentials(username={self.username!r}, password='***')"


def parse_arn(arn: str) -> tuple[str, str, str] | None:
    """``(region, account, name-with-suffix)`` of a secretsmanager ARN, or None."""
    m = ARN_RE.fullmatch(arn)
    return (m.group("region"), m.group("account"), m.group("id")) if m else None


class SecretStore:
    """The secrets of one state directory (every account)."""

    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir) / SECRETS_DIR

    def _dir(self, account_id: str) -> Path:
        if not ACCOUNT_RE.fullmatch(account_id):
            raise SecretError(f"account id {account_id!r} must be 12 digits")
        return self.root / account_id

    @contextmanager
    def _locked(self, account_id: str) -> Iterator[Path]:
        d = self._dir(account_id)
        private_dir(self.root)
        private_dir(d)
        with flocked(d / ".lock"):
            yield d

    @staticmethod
    def _file(d: Path, name: str) -> Path:
        # names may hold '/', which Secrets Manager allows: keep one flat file per secret
        return d / (name.replace("/", "%2F") + ".json")

    def create(self, name: str, value: str, account_id: str, region: str) -> Secret:
        if not NAME_RE.fullmatch(name):
            raise SecretError("secret names are 1-512 characters of letters, digits and /_+=.@-")
        if not value:
            raise SecretError("the secret is empty")
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise SecretError(f"the secret is larger than {MAX_VALUE_BYTES} bytes")
        with self._locked(account_id) as d:
            path = self._file(d, name)
            if path.exists():
                raise SecretError(f"a secret named {name} already exists (delete it first)")
            suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(6))
            arn = f"arn:aws:secretsmanager:{region}:{account_id}:secret:{name}-{suffix}"
            secret = Secret(arn, name, account_id, time.time(), value)
            doc = {"arn": arn, "name": name, "account_id": account_id, "created": secret.created, "value": value}
            write_atomic(path, json.dumps(doc).encode())
        return secret

    def _load(self, path: Path) -> Secret:
        doc = json.loads(path.read_text())
        return Secret(str(doc["arn"]), str(doc["name"]), str(doc["account_id"]), float(doc["created"]),
                      str(doc["value"]))

    def list(self, account_id: str | None = None) -> list[Secret]:
        if not self.root.is_dir():
            return []
        dirs = [self._dir(account_id)] if account_id else sorted(p for p in self.root.iterdir() if p.is_dir())
        out = [self._load(f) for d in dirs if d.is_dir() for f in sorted(d.glob("*.json"))]
        return sorted(out, key=lambda s: (s.account_id, s.name))

    def get(self, arn: str) -> Secret | None:
        """The secret named by ``arn`` (the full ARN, or the ARN without its 6-character suffix)."""
        parsed = parse_arn(arn)
        if parsed is None:
            return None
        region, account, ident = parsed
        for s in self.list(account):
            if s.arn == arn or f"arn:aws:secretsmanager:{region}:{account}:secret:{s.name}" == arn:
                return s
        return None

    def delete(self, name_or_arn: str, account_id: str) -> Secret:
        with self._locked(account_id) as d:
            target = self.get(name_or_arn) if name_or_arn.startswith("arn:") else None
            path = self._file(d, target.name if target else name_or_arn)
            if not path.exists() or (target is not None and target.account_id != account_id):
                raise SecretError(f"no secret {name_or_arn} in account {account_id}")
            secret = self._load(path)
            path.unlink()
        return secret

    def database_secret_problem(self, arn: str, account_id: str) -> str | None:
        """None when ``arn`` names a database secret of ``account_id``, else what is wrong (no value shown)."""
        parsed = parse_arn(arn)
        secret = self.get(arn) if parsed is not None and parsed[1] == account_id else None
        if secret is None:
            return f"Secrets Manager can't find the specified secret: {arn}."
        try:
            database_credentials(secret)
        except SecretError as exc:
            return str(exc)
        return None

    def database_credentials(self, arn: str) -> DatabaseCredentials:
        """``username``/``password`` of a database secret (RDS's JSON shape). Raises ``SecretError``."""
        secret = self.get(arn)
        if secret is None:
            raise SecretError(f"Secrets Manager can't find the specified secret ({arn}).")
        return database_credentials(secret)


def database_credentials(secret: Secret) -> DatabaseCredentials:
    try:
        doc = json.loads(secret.value)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("username"), str) or \
            not isinstance(doc.get("password"), str) or not doc["username"] or not doc["password"]:
        raise SecretError(f"secret {secret.name} must be JSON with non-empty \"username\" and \"password\" "
                          "strings (the Amazon RDS secret format)")
    return DatabaseCredentials(doc["username"], doc["password"])
