#!/usr/bin/env bash
# Installs everything (what slurmpod needs, plus what only the tests use: --with-tests), then runs the whole test
# suite (unit, API, store on SQLite + PostgreSQL, real-Slurm integration) and the linters. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --with-tests
VENV="${SLURMPOD_VENV:-/opt/slurmpod/venv}"
echo "== ruff"
"$VENV/bin/ruff" check .
echo "== mypy (core packages)"
"$VENV/bin/mypy" || { echo "mypy found type errors"; exit 1; }
echo "== import-linter (layer rules in pyproject.toml)"
"$VENV/bin/lint-imports" || { echo "an import breaks a layer rule"; exit 1; }
echo "== pytest"
export SLURMPOD_REQUIRE_POSTGRES=1
# two workers (pytest-xdist), a test file per worker at a time: the real-Slurm tests mostly wait on daemons, so the
# suite takes about half as long on this 2-core machine (each file's fixtures stay in one worker)
XDIST=(-n "${SLURMPOD_TEST_WORKERS:-2}" --dist loadfile)
# (--durations: the slowest tests are named in every run's log, so the suite's time can be watched)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=25 "${XDIST[@]}" "$@"
# The same Slurm tests (a representative set: running all of them twice would double the suite) on the other
# Slurm release: nodes from the image store's bookworm image (Slurm 22.05) instead of the default (trixie, 24.11).
# Only for a whole-suite run (no arguments).
if [ "$#" -eq 0 ]; then
  echo "== pytest, Slurm 22.05 nodes (SLURMPOD_NODE_IMAGE=bookworm)"
  # (the same careful primary start as the rolling update covers replacing both controllers; the containers file
  # keeps its srun, sbatch, bad-input and Docker tests: the pass stays near 8 minutes)
  SLURMPOD_NODE_IMAGE=bookworm exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=10 "${XDIST[@]}" \
    -k "not (replacing_both_controllers or gpus_are_visible_in_the_container or image_file_on_shared_storage \
or named_container_workdir or slurm_native_container)" \
    tests/integration/test_systemd_nodes_local.py tests/integration/test_seed000_local.py \
    tests/integration/test_accounting_local.py tests/integration/test_software_update_local.py \
    tests/integration/test_ha_local.py tests/integration/test_login_local.py \
    tests/integration/test_base_config_local.py tests/integration/test_image_update_local.py \
    tests/integration/test_gpus_local.py tests/integration/test_replace_local.py \
    tests/integration/test_auto_resume_local.py tests/integration/test_deep_health_local.py \
    tests/integration/test_containers_local.py
fi
