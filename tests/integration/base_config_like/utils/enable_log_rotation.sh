#!/bin/bash
# Rotation of the Slurm daemons' logs (a config of its own in /etc/logrotate.d).
set -euo pipefail
install -m 0644 "$(dirname "$0")/slurm-logrotate.conf" /etc/logrotate.d/base-config-like-slurm
echo "log rotation: /etc/logrotate.d/base-config-like-slurm"
