#!/usr/bin/env bash
# The main job on the default configuration: build tiercache, install it as /usr/local/bin/tiercache
# (a copy of the release build, refreshed by every run; PREFIX=DIR to use DIR/bin) and mount BACKING on
# MOUNTPOINT (defaults: a small demo tree under /tmp/tiercache-demo). Needs root or a user allowed
# to mount FUSE file systems (and to write PREFIX/bin).
# Usage: scripts/run.sh [BACKING MOUNTPOINT [extra mount flags...]]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cargo build --release -p tiercache
target=${CARGO_TARGET_DIR:-$PWD/target}
built=$(cd "$target/release" && pwd)/tiercache
prefix=${PREFIX:-/usr/local}
if mkdir -p "$prefix/bin" 2>/dev/null && install -m 755 "$built" "$prefix/bin/tiercache" 2>/dev/null; then
  echo "installed $prefix/bin/tiercache (a copy of $built; scripts/run.sh refreshes it)"
  case ":$PATH:" in
    *":$prefix/bin:"*) tc=tiercache ;;
    *) tc=$prefix/bin/tiercache; echo "note: $prefix/bin is not on your PATH; add it to call plain \`tiercache\`" ;;
  esac
else
  tc=$built
  echo "note: cannot write $prefix/bin (not root?); run $built, or PREFIX=\$HOME/.local scripts/run.sh"
fi
if [ $# -ge 2 ]; then
  backing=$1 mnt=$2
  shift 2
else
  backing=/tmp/tiercache-demo/slow mnt=/tmp/tiercache-demo/fast
  if grep -q " $mnt " /proc/self/mountinfo; then
    # Running already (or a dead demo mount): leave its files alone.
    if "$tc" stats "$mnt" >/dev/null 2>&1; then
      echo "The demo is already mounted on $mnt; its files are left as they are."
      "$tc" stats "$mnt"
      echo
      echo "Stop it (writes everything back first): $tc unmount $mnt"
    else
      echo "$mnt is mounted but no tiercache daemon answers (a dead demo?)."
      echo "Clear it with: $tc unmount --force $mnt   then run scripts/run.sh again."
    fi
    exit 0
  fi
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
