#!/bin/bash
# Packages every node gets (through the host's package proxy: nodes have no route off the machine).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends hello
hello --version | head -n 1
