#!/bin/bash
# runs after every job on the compute node (named in slurm.conf by start_slurm.sh)
echo "$SLURM_JOB_ID" >> /var/tmp/base-config-like-epilog
exit 0
