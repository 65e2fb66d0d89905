#!/usr/bin/env bash
# Builds the Debian package tiercache_VERSION_ARCH.deb with plain dpkg-deb (no cargo-deb: CI
# stays fast). Contents: the binary, the C library and its header, man pages and shell
# completions generated from the command line definition (`tiercache generate-assets`), every
# file under packaging/systemd/, the Grafana dashboard and the Prometheus alert rules.
#
#   scripts/package.sh [--no-build] [--release-dir DIR] [--out DIR]
#
# --no-build packages what the release directory already holds (the tests use it);
# --release-dir is cargo's release output directory [default: target/release]; --out is where
# the .deb goes [default: target/debian]. Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
out=target/debian
rel=target/release
while (($#)); do
  case "$1" in
    --no-build) build=0 ;;
    --out) out="$2"; shift ;;
    --release-dir) rel="$2"; shift ;;
    *) echo "package.sh: unknown argument $1 (expected --no-build, --release-dir DIR, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || { echo "package.sh: no version in Cargo.toml" >&2; exit 1; }
arch=$(dpkg --print-architecture)
multiarch=$(gcc -print-multiarch 2>/dev/null || true)
libdir=usr/lib${multiarch:+/$multiarch}

if ((build)); then
  cargo build --release -p tiercache -p tiercache-capi >&2
fi
bin=$rel/tiercache
lib=$rel/libtiercache_capi.so
# A test build (tiercache's dev-dependency on tiercache-capi) leaves the library in deps/ only.
[ -f "$lib" ] || lib=$rel/deps/libtiercache_capi.so
# cbindgen writes the header into the capi build script's output directory; the newest one is
# this build's.
header=$(ls -t "$rel"/build/tiercache-capi-*/out/include/tiercache.h 2>/dev/null | head -n1 || true)
for f in "$bin" "$lib" "$header"; do
  [ -n "$f" ] && [ -f "$f" ] || {
    echo "package.sh: ${f:-tiercache.h} is missing; build first (cargo build --release -p tiercache -p tiercache-capi)" >&2
    exit 1
  }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
install -d "$root/DEBIAN" "$root/usr/bin" "$root/$libdir" "$root/usr/include" \
  "$root/usr/share/man/man1" "$root/usr/share/doc/tiercache" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" \
  "$root/usr/share/tiercache/grafana" "$root/usr/share/tiercache/prometheus"
install -m 0755 "$bin" "$root/usr/bin/tiercache"
strip --strip-unneeded "$root/usr/bin/tiercache"
install -m 0644 "$lib" "$root/$libdir/libtiercache_capi.so"
strip --strip-unneeded "$root/$libdir/libtiercache_capi.so"
install -m 0644 "$header" "$root/usr/include/tiercache.h"

"$bin" generate-assets "$stage/assets"
for page in "$stage"/assets/man/*.1; do
  gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
done
install -m 0644 "$stage/assets/completions/tiercache.bash" \
  "$root/usr/share/bash-completion/completions/tiercache"
install -m 0644 "$stage/assets/completions/_tiercache" "$root/usr/share/zsh/vendor-completions/"
install -m 0644 "$stage/assets/completions/tiercache.fish" "$root/usr/share/fish/vendor_completions.d/"

install -m 0644 packaging/grafana/tiercache.json "$root/usr/share/tiercache/grafana/"
install -m 0644 packaging/prometheus/tiercache-rules.yml "$root/usr/share/tiercache/prometheus/"
if [ -d packaging/systemd ]; then
  install -d "$root/usr/lib/systemd/system"
  find packaging/systemd -maxdepth 1 -type f -exec install -m 0644 {} "$root/usr/lib/systemd/system/" \;
fi
install -m 0644 README.md "$root/usr/share/doc/tiercache/README.md"
cat >"$root/usr/share/doc/tiercache/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tiercache

Files: *
License: MIT OR Apache-2.0
EOF

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: tiercache
Version: $version
Architecture: $arch
Maintainer: tiercache developers <tiercache@localhost>
Installed-Size: $size
Depends: fuse3, libc6
Section: admin
Priority: optional
Description: tiered, priority-aware file cache for slow storage
 A FUSE file system that serves a slow directory (HDD, NFS) through a memory tier,
 an SSD tier and a remote memcached tier, keeping priority directories hot.
 Includes the C zero-copy client library and header, man pages, shell
 completions, systemd units, a Grafana dashboard and Prometheus alert rules.
EOF
(cd "$root" && find . -type f ! -path ./DEBIAN/\* -printf '%P\0' | sort -z | xargs -0 md5sum) \
  >"$root/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/tiercache_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
