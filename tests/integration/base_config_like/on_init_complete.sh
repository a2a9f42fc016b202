#!/bin/bash
# The same provisioning run as an extension script (OnInitComplete): Slurm already runs on this node.
set -euo pipefail
cd "$(dirname "$0")"
exec ./on_create.sh on_init_complete
