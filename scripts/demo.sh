#!/usr/bin/env bash
# Installs everything, then runs the main demo: seed 000's cluster (1 controller + 2 compute in partition
# `compute`) on real Slurm daemons on this machine, and a job on it. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec slurmpod demo "$@"
