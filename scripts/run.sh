#!/usr/bin/env bash
# The main job on the default configuration: build tiercache and mount BACKING on MOUNTPOINT
# (defaults: a small demo tree under /tmp/tiercache-demo). Needs root or a user allowed to mount
# FUSE file systems.
# Usage: scripts/run.sh [BACKING MOUNTPOINT [extra mount flags...]]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p tiercache
tc=./target/release/tiercache
if [ $# -ge 2 ]; then
  backing=$1 mnt=$2
  shift 2
else
  backing=/tmp/tiercache-demo/slow mnt=/tmp/tiercache-demo/fast
  mkdir -p "$backing/www/top" "$backing/backup" "$mnt"
  for i in 1 2 3; do head -c 200000 /dev/urandom >"$backing/www/top/page$i.html"; done
  head -c 4000000 /dev/urandom >"$backing/backup/archive.bin"
  set -- --priority www/top
fi
"$tc" mount "$backing" "$mnt" "$@"
cat "$mnt"/www/top/* >/dev/null 2>&1 || true
"$tc" stats "$mnt"
echo
echo "tiercache serves $mnt. Try: $tc stats $mnt --watch 2"
echo "Stop it (writes everything back first): $tc unmount $mnt"
