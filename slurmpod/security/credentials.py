"""Access keys the API server accepts: ``<state_dir>/auth/credentials.json`` (0600 in a 0700 directory).

SigV4 is an HMAC: the server must hold each secret access key in the clear to recompute signatures, so
hashing is impossible and encrypting with a key file stored next to it would only move the problem. The
store is therefore protected the way ``~/.aws/credentials`` is: one JSON file readable only by its owner
(root), in a directory only root may enter, replaced atomically (temp file + fsync + ``rename``) under an
exclusive ``flock`` so concurrent ``slurmpod credentials create`` calls never lose an entry.

``CredentialStore.lookup`` re-reads the file only when its (inode, size, mtime) changed, so keys created
or deleted while the server runs take effect on the next request.
"""

from __future__ import annotations

import os
import re
import secrets
import string
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slurmpod.files import JsonFile

AUTH_DIR = "auth"
FILE_NAME = "credentials.json"
ACCESS_KEY_RE = re.compile(r"AKIA[A-Z0-9]{16}")
ACCOUNT_RE = re.compile(r"\d{12}")
_KEY_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


class CredentialError(Exception):
    """A bad request to the credential store (message fit for the operator)."""


@dataclass(frozen=True)
class Credential:
    access_key_id: str
    secret_access_key: str
    account_id: str
    created: float

    def as_create_access_key(self) -> dict[str, str]:
        """IAM CreateAccessKey's shape, plus the account the key acts as."""
        return {"AccessKeyId": self.access_key_id, "SecretAccessKey": self.secret_access_key,
                "AccountId": self.account_id}

    def summary(self) -> dict[str, str]:
        """Everything but the secret (``credentials list``)."""
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created))
        return {"AccessKeyId": self.access_key_id, "AccountId": self.account_id, "CreateDate": created}


def credentials_path(state_dir: Path) -> Path:
    return Path(state_dir) / AUTH_DIR / FILE_NAME


def new_access_key_id() -> str:
    return "AKIA" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))


def new_secret_access_key() -> str:
    return "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))


def _parse(doc: dict[str, Any]) -> dict[str, Credential]:
    out: dict[str, Credential] = {}
    for item in doc.get("credentials", []):
        cred = Credential(str(item["access_key_id"]), str(item["secret_access_key"]), str(item["account_id"]),
                          float(item.get("created", 0.0)))
        out[cred.access_key_id] = cred
    return out


class CredentialStore:
    """The credential file of one state directory; thread-safe; cheap to query on every request."""

    def __init__(self, state_dir: Path) -> None:
        self.path = credentials_path(state_dir)
        self._file = JsonFile(self.path, lock_name=".lock", indent=1)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._cache: dict[str, Credential] = {}

    # ---- reading -----------------------------------------------------------------------------------

    def _load(self) -> dict[str, Credential]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if stamp != self._stamp:
                self._cache = _parse(self._file.read({}))
                self._stamp = stamp
            return self._cache

    def lookup(self, access_key_id: str) -> Credential | None:
        return self._load().get(access_key_id)

    def list(self) -> list[Credential]:
        return sorted(self._load().values(), key=lambda c: (c.account_id, c.created, c.access_key_id))

    # ---- writing -----------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Credential]]:
        with self._file.locked():
            current = _parse(self._file.read({}))
            yield current
            self._file.write({"version": 1, "credentials": [asdict(c) for c in current.values()]})

    def create(self, account_id: str) -> Credential:
        if not ACCOUNT_RE.fullmatch(account_id):
            raise CredentialError(f"account id {account_id!r} must be 12 digits")
        with self._locked() as current:
            key = new_access_key_id()
            while key in current:
                key = new_access_key_id()
            cred = Credential(key, new_secret_access_key(), account_id, time.time())
            current[key] = cred
        return cred

    def delete(self, access_key_id: str) -> None:
        with self._locked() as current:
            if current.pop(access_key_id, None) is None:
                raise CredentialError(f"no access key {access_key_id}")

    def get_or_create(self, account_id: str) -> Credential:
        """The oldest key of ``account_id``, creating one if it has none (tests, demo, benchmarks)."""
        for cred in self.list():
            if cred.account_id == account_id:
                return cred
        return self.create(account_id)
