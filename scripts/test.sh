#!/usr/bin/env bash
# Installs everything, then runs the whole test suite (unit, API, store on SQLite + PostgreSQL,
# real-Slurm integration) and the linters. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
VENV="${SLURMPOD_VENV:-/opt/slurmpod/venv}"
echo "== ruff"
"$VENV/bin/ruff" check .
echo "== mypy (core packages)"
"$VENV/bin/mypy" || { echo "mypy found type errors"; exit 1; }
echo "== import-linter (layer rules in pyproject.toml)"
"$VENV/bin/lint-imports" || { echo "an import breaks a layer rule"; exit 1; }
echo "== pytest"
export SLURMPOD_REQUIRE_POSTGRES=1
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
