#!/usr/bin/env bash
# Installs what running slurmpod needs on a fresh Debian 12 machine (run as root): Debian's Slurm 22.05 + munge +
# iproute2 (real clusters), and slurmpod itself in a virtualenv with its postgres, ssh and demo extras.
# `--with-tests` (what scripts/test.sh passes) adds what only the tests use: PostgreSQL (store tests), sshd (ssh
# provider test hosts), Chromium (console browser tests) and the test, bench (moto) and dev (ruff, mypy,
# import-linter) extras. Idempotent: safe to run again. Prints a few progress lines; errors stay visible.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --with-tests) WITH_TESTS=1 ;;
    *) echo "usage: scripts/install.sh [--with-tests]" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  echo "slurmpod: run this as root (it installs Debian packages and creates network namespaces)" >&2
  exit 1
fi

PKGS=(slurmctld slurmd slurm-client munge iproute2 util-linux procps iputils-ping openssh-client
      mmdebstrap  # builds the nodes' root filesystem images (slurmpod images build)
      gcc libc6-dev  # builds slurmpod's SPANK plugin (srun --auto-resume) against each image's Slurm headers
      slurmdbd mariadb-server  # accounting: run inside each cluster's accounting host, never on this host
      python3 python3-venv python3-pip ca-certificates logrotate
      apt-cacher-ng  # the nodes' package proxy: slurmpod runs its own, bound to the cluster bridges only
      docker-registry  # the clusters' container registry (srun --container-image): slurmpod runs its own per bridge
      podman squashfs-tools)  # slurmpod containers import (a private storage per import; .sqsh root filesystems)
if [ "$WITH_TESTS" = 1 ]; then
  PKGS+=(openssh-server  # ssh provider tests: sshd runs only inside test hosts (namespaces), never on this host
         postgresql  # the store tests on a real PostgreSQL (a private server per test session)
         chromium fonts-dejavu-core)  # the console's browser tests (Playwright drives /usr/bin/chromium)
fi
# a host sshd already serving this machine (e.g. your login) is left alone; one our install adds is not started
host_sshd_preinstalled=no
dpkg-query -W -f='${Status}' openssh-server 2>/dev/null | grep -q "install ok installed" && host_sshd_preinstalled=yes
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # quiet: no per-package lines and no debconf chatter; real errors still reach stderr
  apt-get update -qq 2> >(grep -v '^debconf: ' >&2) >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" 2> >(grep -v -e '^debconf: ' -e '^dpkg-preconfigure: ' >&2) >/dev/null
fi
# mariadb-server's postinst may start (and enable) a host MariaDB: slurmpod runs MariaDB only inside cluster
# nodes, so stop and disable any host instance (harmless when none runs, e.g. under a policy-rc.d).
# Likewise apt-cacher-ng: its Debian service would proxy for anyone on every interface (port 3142); slurmpod
# runs its own per state dir, listening on the cluster bridges only (slurmpod/providers/local/pkgproxy.py)
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now mariadb.service slurmdbd.service apt-cacher-ng.service docker-registry.service \
    >/dev/null 2>&1 || true
elif command -v update-rc.d >/dev/null 2>&1; then
  for svc in mariadb slurmdbd apt-cacher-ng docker-registry; do update-rc.d "$svc" disable >/dev/null 2>&1 || true; done
fi
# also offline (systemd not running now): a later boot under systemd must not start Debian's apt-cacher-ng or
# docker-registry (which listens on every interface, port 5000; slurmpod's listen on the cluster bridges only)
if command -v systemctl >/dev/null 2>&1; then
  systemctl disable apt-cacher-ng.service docker-registry.service >/dev/null 2>&1 || true
fi
for pidf in /run/apt-cacher-ng/pid /var/run/apt-cacher-ng/pid; do
  if [ -s "$pidf" ] && [ "$(cat "/proc/$(cat "$pidf")/comm" 2>/dev/null)" = apt-cacher-ng ]; then
    pid=$(cat "$pidf"); kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
done
if [ "$host_sshd_preinstalled" = no ]; then
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
  elif command -v update-rc.d >/dev/null 2>&1; then
    update-rc.d ssh disable >/dev/null 2>&1 || true
  fi
  if [ -s /run/sshd.pid ] && [ "$(cat "/proc/$(cat /run/sshd.pid)/comm" 2>/dev/null)" = sshd ]; then
    kill -TERM "$(cat /run/sshd.pid)" 2>/dev/null || true
  fi
fi
for pidf in /run/mysqld/mysqld.pid /var/run/mysqld/mysqld.pid; do
  if [ -s "$pidf" ] && [ "$(cat "/proc/$(cat "$pidf")/comm" 2>/dev/null)" = mariadbd ]; then
    pid=$(cat "$pidf"); kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
done

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "slurmpod: needs Python >= 3.11 (found $("$PY" --version 2>&1))" >&2
  exit 1
fi
VENV="${SLURMPOD_VENV:-/opt/slurmpod/venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
# running slurmpod: postgres (--db postgresql+psycopg://...), ssh (the ssh provider), demo (scripts/demo.sh);
# --with-tests: test (pytest, the pinned AWS CLI, Playwright's Python package only: never its own browser download,
# the tests use Debian's chromium), bench (moto, for bench/moto_compare.py), dev (ruff, mypy, import-linter)
EXTRAS="postgres,ssh,demo"
[ "$WITH_TESTS" = 1 ] && EXTRAS="$EXTRAS,test,bench,dev"
echo "== installing slurmpod [$EXTRAS] into $VENV"
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check --no-input)
export PIP_ROOT_USER_ACTION=ignore PIP_NO_WARN_SCRIPT_LOCATION=1
"${PIP[@]}" install --upgrade pip >/dev/null
# (PYTHONWARNINGS: setuptools' editable-install banner is a warning, not news; errors still print)
PYTHONWARNINGS=ignore PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "${PIP[@]}" install -e ".[$EXTRAS]" >/dev/null
ln -sf "$VENV/bin/slurmpod" /usr/local/bin/slurmpod
# The default node image: a Debian trixie root filesystem (Slurm 24.11, HyperPod's release; munge, systemd, sudo,
# ...) + slurmpod's node layer, built once into the host-wide image store (${SLURMPOD_IMAGE_STORE:-/var/lib/slurmpod/images})
# and reused by every state dir (the demo's, each test's). Skipped when the store has it for the current recipe
# version; apt's downloads are cached in /var/cache/slurmpod/apt. SLURMPOD_SKIP_IMAGE_BUILD=1 skips this step (the
# server then needs an image built later, `slurmpod images build --default`, or `--node-image builtin`).
if [ "${SLURMPOD_SKIP_IMAGE_BUILD:-0}" != 1 ]; then
  echo "== default node image (trixie, Slurm 24.11)"
  "$VENV/bin/slurmpod" images build --default --store-only --suite trixie
  # Debian 12's Slurm 22.05, selectable per group (ImageId) or with --node-image bookworm
  echo "== bookworm node image (Slurm 22.05)"
  "$VENV/bin/slurmpod" images build --default --store-only --suite bookworm
  # Debian unstable's Slurm (26.05 today): a permitted major upgrade from 24.11 (tests/integration/
  # test_slurm_upgrade_local.py). sid moves daily: a day it cannot be installed is a warning, not a failed install
  echo "== sid node image (Debian unstable's Slurm)"
  "$VENV/bin/slurmpod" images build --default --store-only --suite sid ||
    echo "WARNING: no sid image today (Debian sid not installable?); the 24.11 -> 26.05 upgrade test will try again" >&2
fi
echo "== ready: slurmpod $("$VENV/bin/slurmpod" --version | awk '{print $NF}') in $VENV (/usr/local/bin/slurmpod)"
