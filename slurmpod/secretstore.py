"""Compatibility shim: the secret store moved to ``slurmpod.security.secrets`` and ``secret_file`` to
``slurmpod.files``. Kept only for ``slurmpod.reconciler`` (accounting.py, slurm_runtime.py) until its imports
are switched; delete it then."""

from slurmpod.files import secret_file
from slurmpod.security.secrets import DatabaseCredentials, Secret, SecretError, SecretStore, parse_arn

__all__ = ["DatabaseCredentials", "Secret", "SecretError", "SecretStore", "parse_arn", "secret_file"]
