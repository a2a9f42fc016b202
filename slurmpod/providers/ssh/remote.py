"""What the ``ssh`` provider runs on a host: checks, file tracking, cleanup (bash, as argv lists).

Everything slurmpod (and its runner) puts on a host is recorded in ``/var/lib/slurmpod-node/manifest``, one
entry per line, so ``terminate`` and ``reset`` can undo it:

* ``C PATH``  created by slurmpod (file, link or directory tree): removed
* ``B PATH``  a file that existed and was replaced: restored from ``/var/lib/slurmpod-node/backup/PATH``
* ``D DIR``   a directory that existed: entries that were not there at that time are removed
* ``V PATH`` / ``VD DIR``  a volume (created / pre-existing directory): kept by ``reset``, undone by terminate
* ``H CLUSTER``  the cluster's block in ``/etc/hosts``: removed

Lifecycle scripts may append their own ``C PATH`` lines to ``$SLURMPOD_MANIFEST`` (set for every command).
"""

from __future__ import annotations

from collections.abc import Sequence

STATE = "/var/lib/slurmpod-node"  # not /var/lib/slurmpod: that is the server's own default state dir
MANIFEST = f"{STATE}/manifest"
BACKUP = f"{STATE}/backup"
INSTANCE_FILE = f"{STATE}/instance"

_COMMON = f"""
M={MANIFEST}; B={BACKUP}
mkdir -p {STATE} "$B"; chmod 700 {STATE}; touch "$M"
has() {{ grep -qxF -- "$1" "$M"; }}
covered() {{  # the path (or an ancestor) is already ours
  local q=$1
  while :; do
    has "C $q" && return 0; has "V $q" && return 0; has "VD $q" && return 0
    if [ "$q" = "$1" ]; then has "B $q" && return 0; has "D $q" && return 0; fi
    [ "$q" = / ] && return 1
    q=$(dirname -- "$q")
  done
}}
track() {{  # track KIND-PREFIX PATH: record how to undo what is about to happen to PATH
  local v=$1 p q; p=$(realpath -m -s -- "$2")
  case $p in /|/proc*|/sys*|/dev*|{STATE}*) return 0;; esac
  covered "$p" && return 0
  if [ -d "$p" ] && [ ! -L "$p" ]; then
    mkdir -p -- "$B$p"; ls -A1 -- "$p" > "$B$p/.slurmpod-entries"; echo "${{v}}D $p" >> "$M"
  elif [ -e "$p" ] || [ -L "$p" ]; then
    mkdir -p -- "$B$(dirname -- "$p")"; cp -a -- "$p" "$B$p"; echo "B $p" >> "$M"
  else
    q=$p
    while [ ! -e "$(dirname -- "$q")" ] && [ "$(dirname -- "$q")" != / ]; do q=$(dirname -- "$q"); done
    covered "$q" || echo "${{v:-C}} $q" >> "$M"
  fi
}}
"""
# ``track`` of a pre-existing directory gives "D DIR" (kind prefix "" -> "D", "V" -> "VD").

#: bash -c TRACK_AND_EXEC slurmpod N path1..pathN argv...  (tracks the paths, then execs argv with stdin)
TRACK_AND_EXEC = _COMMON + """
n=$1; shift
i=0; while [ "$i" -lt "$n" ]; do track "" "$1"; shift; i=$((i+1)); done
exec "$@"
"""

#: bash -c TRACK_VOLUMES slurmpod path...  (volumes: kept across reset)
TRACK_VOLUMES = _COMMON + """
for p in "$@"; do track V "$p"; mkdir -p -- "$p"; done
"""

#: merges the new content (tmp file $1) into an authorized_keys file ($2) instead of replacing it, so the
#: key slurmpod logs in with keeps working
MERGE_AUTHORIZED_KEYS = """
set -e
t=$1; f=$2
if [ -f "$f" ]; then
  cat -- "$f" "$t" | awk 'NF && !seen[$0]++' > "$t.merged"
  cat -- "$t.merged" > "$f"; rm -f -- "$t" "$t.merged"
else
  mv -f -- "$t" "$f"
fi
"""

#: bash -c HOSTS_BLOCK slurmpod CLUSTER  (stdin: "ip hostname" lines; empty = remove the block)
HOSTS_BLOCK = _COMMON + """
c=$1; begin="# slurmpod $c begin"; end="# slurmpod $c end"
new=$(cat)
tmp=$(mktemp)
awk -v b="$begin" -v e="$end" '$0==b{skip=1;next} $0==e{skip=0;next} !skip' /etc/hosts > "$tmp"
if [ -n "$new" ]; then
  { printf '%s\\n' "$begin"; printf '%s\\n' "$new"; printf '%s\\n' "$end"; } >> "$tmp"
  has "H $c" || echo "H $c" >> "$M"
fi
cat "$tmp" > /etc/hosts; rm -f "$tmp"
"""

#: stops every daemon slurmpod starts (by pidfile, then by name: the host was checked free of them)
STOP_DAEMONS = """
stop() {  # pidfile comm
  pid=$(cat "$1" 2>/dev/null); [ -n "$pid" ] || pid=$(pgrep -x "$2" | head -n1)
  [ -n "$pid" ] || return 0
  [ "$(cat /proc/$pid/comm 2>/dev/null)" = "$2" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null; return 0
}
stop /run/slurmctld.pid slurmctld
stop /run/slurmd.pid slurmd
pkill -KILL -x slurmstepd 2>/dev/null
stop /run/munge/munged.pid munged
for c in slurmctld slurmd munged; do pkill -KILL -x "$c" 2>/dev/null; done
exit 0
"""

#: bash -c UNDO slurmpod MODE  (MODE reset: keep volumes; terminate: undo everything, drop the state dir)
UNDO = _COMMON + """
mode=$1
tac "$M" | while read -r kind p; do
  case $kind in
    C) rm -rf -- "$p" ;;
    B) if [ -e "$B$p" ] || [ -L "$B$p" ]; then rm -rf -- "$p"; cp -a -- "$B$p" "$p"; fi ;;
    D) [ -d "$p" ] && ls -A1 -- "$p" | while IFS= read -r e; do
         grep -qxF -- "$e" "$B$p/.slurmpod-entries" 2>/dev/null || rm -rf -- "$p/$e"; done ;;
    V) [ "$mode" = terminate ] && rm -rf -- "$p" ;;
    VD) [ "$mode" = terminate ] && [ -d "$p" ] && ls -A1 -- "$p" | while IFS= read -r e; do
         grep -qxF -- "$e" "$B$p/.slurmpod-entries" 2>/dev/null || rm -rf -- "$p/$e"; done ;;
    H) awk -v b="# slurmpod $p begin" -v e="# slurmpod $p end" \
         '$0==b{skip=1;next} $0==e{skip=0;next} !skip' /etc/hosts > /etc/hosts.slurmpod-tmp &&
         cat /etc/hosts.slurmpod-tmp > /etc/hosts; rm -f /etc/hosts.slurmpod-tmp ;;
  esac
done
if [ "$mode" = terminate ]; then
  rm -rf -- {state}
else
  grep -E '^(V|VD|H) ' "$M" > "$M.keep" || true
  mv -f "$M.keep" "$M"
fi
exit 0
""".replace("{state}", STATE)

#: one line per fact, read by ``parse_facts``
FACTS = """
. /etc/os-release 2>/dev/null
echo "os=${PRETTY_NAME:-unknown}"
echo "os_like=${ID:-} ${ID_LIKE:-}"
echo "hostname=$(hostname -s 2>/dev/null || hostname)"
echo "time=$(date +%s.%N)"
missing=""
for t in slurmctld slurmd munged scontrol sinfo munge setpriv install ss; do
  command -v "$t" >/dev/null 2>&1 || missing="$missing $t"
done
echo "missing=${missing# }"
echo "ports=$(ss -Hltn 2>/dev/null | awk '{print $4}' | grep -E ':(6817|6818)$' | tr '\\n' ' ')"
echo "daemons=$(for c in munged slurmd slurmctld; do pgrep -x "$c" >/dev/null 2>&1 && printf '%s ' "$c"; done)"
echo "ours=$(cat {instance} 2>/dev/null)"
echo "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
command -v apt-get >/dev/null 2>&1 && echo apt=yes || echo apt=no
echo "nvidia=$(for d in /dev/nvidia[0-9]*; do [ -c "$d" ] && printf '%s ' "$d"; done)"
echo "neuron=$(for d in /dev/neuron[0-9]*; do [ -c "$d" ] && printf '%s ' "$d"; done)"
""".replace("{instance}", INSTANCE_FILE)

APT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "util-linux", "iproute2")
#: installs the packages without starting their services (slurmpod starts the daemons itself)
APT_INSTALL = f"""
set -e
export DEBIAN_FRONTEND=noninteractive
printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d.slurmpod
had_policy=no; [ -e /usr/sbin/policy-rc.d ] && had_policy=yes
[ "$had_policy" = yes ] || cp /usr/sbin/policy-rc.d.slurmpod /usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d
trap '[ "$had_policy" = yes ] || rm -f /usr/sbin/policy-rc.d; rm -f /usr/sbin/policy-rc.d.slurmpod' EXIT
apt-get install -y -q --no-install-recommends {" ".join(APT_PACKAGES)}
if command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now munge.service slurmd.service slurmctld.service >/dev/null 2>&1 || true
fi
"""

_VALUE_OPTS = {"-m", "--mode", "-o", "--owner", "-g", "--group", "-t", "--target-directory", "-S", "--suffix"}


def _positionals(args: Sequence[str]) -> tuple[list[str], set[str]]:
    pos: list[str] = []
    flags: set[str] = set()
    skip = False
    only_pos = False
    for a in args:
        if skip:
            skip = False
            continue
        if only_pos or not a.startswith("-") or a == "-":
            pos.append(a)
        elif a == "--":
            only_pos = True
        elif a in _VALUE_OPTS:
            skip = True
        else:
            flags.add(a)
    return pos, flags


def _tar_targets(args: Sequence[str]) -> list[str]:
    """``tar -x ... -C DIR -- MEMBER...`` (``providers.nodefiles``): the members it names, under DIR."""
    if "-x" not in args or "--" not in args:
        return []
    base = args[args.index("-C") + 1] if "-C" in args and args.index("-C") + 1 < len(args) else "/"
    return ["/" + f"{base.strip('/')}/{m}".strip("/") for m in args[args.index("--") + 1:]]


def write_targets(argv: Sequence[str]) -> list[str]:
    """The absolute paths a file-writing command (install, mv, ln, mkdir, cp, touch, tar -x) creates or replaces."""
    if not argv:
        return []
    cmd = argv[0].rsplit("/", 1)[-1]
    if cmd == "tar":
        return _tar_targets(argv[1:])
    pos, flags = _positionals(argv[1:])
    if cmd == "install":
        targets = pos if "-d" in flags or "--directory" in flags else pos[-1:]
    elif cmd in ("mv", "ln", "cp"):
        targets = pos[-1:] if len(pos) >= 2 else []
    elif cmd in ("mkdir", "touch"):
        targets = pos
    else:
        targets = []
    return [t for t in targets if t.startswith("/") and not t.endswith(".slurmpod-tmp")]


def tracked_argv(argv: Sequence[str], login_user: str) -> list[str]:
    """``argv`` wrapped so the paths it writes are recorded first (see the module docstring).

    For a root login, replacing ``/root/.ssh/authorized_keys`` becomes a merge: slurmpod must keep the
    key it logs in with.
    """
    targets = write_targets(argv)
    if not targets:
        return list(argv)
    cmd = argv[0].rsplit("/", 1)[-1]
    if login_user == "root" and cmd == "mv" and targets == ["/root/.ssh/authorized_keys"]:
        pos, _ = _positionals(argv[1:])
        argv = ["bash", "-c", MERGE_AUTHORIZED_KEYS, "slurmpod-merge", pos[0], targets[0]]
    return ["bash", "-c", TRACK_AND_EXEC, "slurmpod-track", str(len(targets)), *targets, *argv]


def parse_facts(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out
