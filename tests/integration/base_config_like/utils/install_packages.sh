#!/bin/bash
# Packages every node gets (through the host's package proxy: nodes have no route off the machine).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# a download that stalls upstream is retried after 30 s of silence instead of apt's default 120 s
apt_opts=(-o Acquire::http::Timeout=30 -o Acquire::Retries=5)
apt-get "${apt_opts[@]}" update -q
apt-get "${apt_opts[@]}" install -y -q --no-install-recommends hello
hello --version | head -n 1
