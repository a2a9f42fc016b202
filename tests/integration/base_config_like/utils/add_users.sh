#!/bin/bash
# add_users.sh <file>: one user per line, "name,uid,home" (# comments); same uid on every node, home on the
# cluster's shared /home (created once, whichever node comes first).
set -euo pipefail
while IFS=, read -r name uid home; do
  if [[ -z "$name" || $name == \#* ]]; then continue; fi
  if ! id -u "$name" >/dev/null 2>&1; then
    groupadd --gid "$uid" "$name"
    useradd --no-create-home --uid "$uid" --gid "$uid" --home-dir "$home" --shell /bin/bash "$name"
  fi
  install -d -m 0750 -o "$uid" -g "$uid" "$home"
  echo "user $name: $(id "$name")"
done < "$1"
