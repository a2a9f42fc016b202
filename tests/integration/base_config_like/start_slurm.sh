#!/bin/bash
# start_slurm.sh <controller|compute|login> <controller ip[,ip...]>: start this node's Slurm daemon with systemd.
# Controller: slurmctld. Compute/login: slurmd.service rendered from its ${SLURMD_OPTIONS} template with envsubst
# (configless: --conf-server), then `systemctl enable --now slurmd`. The other daemon's unit is set aside.
# envsubst is run with no variable list, as AWS's start_slurm.sh does: it also blanks the unit's $MAINPID
# (ExecReload); at OnCreate slurmpod's daemons phase renders the unit again from its pristine template.
set -euxo pipefail

role=$1
IFS=, read -r -a ctl_ips <<<"$2"
units=/etc/systemd/system

# like AWS's prolog/epilog step: a persistent copy on every node, named in the controller's slurm.conf
mkdir -p /opt/slurm/etc/scripts
install -m 0755 "$(dirname "$0")/epilog.sh" /opt/slurm/etc/scripts/epilog.sh

if [[ $role == controller ]]; then
  # slurm.conf is there before OnCreate (API-driven cluster): drop old lines, append ours, then start slurmctld
  sed -i '/^Epilog=/d' /opt/slurm/etc/slurm.conf
  printf '\n' >> /opt/slurm/etc/slurm.conf
  echo "Epilog=/opt/slurm/etc/scripts/epilog.sh" >> /opt/slurm/etc/slurm.conf
  systemctl enable --now slurmctld
  mv "$units/slurmd.service" "$units/slurmd_DO_NOT_START_ON_CONTROLLER.service" \
    || echo "slurmd.service already set aside"
else
  servers=$(printf '%s:6817,' "${ctl_ips[@]}")
  servers=${servers%,}
  # the primary controller must answer before slurmd asks it for the configuration (slurmd would retry in 10 s)
  for _ in $(seq 120); do
    if timeout 1 bash -c "exec 3<>/dev/tcp/${ctl_ips[0]}/6817" 2>/dev/null; then break; fi
    sleep 0.5
  done
  SLURMD_OPTIONS="--conf-server $servers" envsubst < "$units/slurmd.service" > slurmd.service
  mv slurmd.service "$units/slurmd.service"
  systemctl daemon-reload
  systemctl enable --now slurmd
  mv "$units/slurmctld.service" "$units/slurmctld_DO_NOT_START_ON_CONTROLLER.service" \
    || echo "slurmctld.service already set aside"
fi
echo "start_slurm.sh: $role done"
