#!/bin/bash
# Entry point (OnCreate or OnInitComplete) of a small lifecycle source that does what AWS's base-config does,
# written for slurmpod's tests: check the resource config, then run lifecycle_script.py with it and with
# the provisioning_parameters.json next to this script. Its output goes to /var/log/provision/provisioning.log.
set -euo pipefail

stage=${1:-on_create}
mkdir -p /var/log/provision

if [[ -z "${SAGEMAKER_RESOURCE_CONFIG_PATH:-}" ]]; then
  SAGEMAKER_RESOURCE_CONFIG_PATH=/opt/ml/config/resource_config.json
  echo "[base-config-like] SAGEMAKER_RESOURCE_CONFIG_PATH unset; using $SAGEMAKER_RESOURCE_CONFIG_PATH"
  if [[ ! -f "$SAGEMAKER_RESOURCE_CONFIG_PATH" ]]; then
    echo "[base-config-like] no resource config: not a HyperPod node, nothing to do"
    exit 0
  fi
elif [[ ! -f "$SAGEMAKER_RESOURCE_CONFIG_PATH" ]]; then
  echo "[base-config-like] $SAGEMAKER_RESOURCE_CONFIG_PATH does not exist" >&2
  exit 1
fi

echo "[base-config-like] $stage: resource config $SAGEMAKER_RESOURCE_CONFIG_PATH, parameters ./provisioning_parameters.json"
exec python3 -u lifecycle_script.py --stage "$stage" \
  -rc "$SAGEMAKER_RESOURCE_CONFIG_PATH" -pp provisioning_parameters.json
