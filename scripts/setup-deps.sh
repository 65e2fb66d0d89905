#!/usr/bin/env bash
# Installs what tiercache's mount, tests and benchmarks use (Debian packages). Idempotent.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null || need+=(fuse3)
# mount.fuse3 (fuse3): the fstab / `mount -t fuse.tiercache` test.
{ [ -x /sbin/mount.fuse3 ] || [ -x /usr/sbin/mount.fuse3 ]; } || need+=(fuse3)
# systemd-analyze and systemd-escape: the unit template's test.
{ command -v systemd-analyze && command -v systemd-escape; } >/dev/null || need+=(systemd)
command -v fio >/dev/null || need+=(fio)
command -v bindfs >/dev/null || need+=(bindfs)
command -v sqlite3 >/dev/null || need+=(sqlite3)
command -v git >/dev/null || need+=(git)
command -v python3 >/dev/null || need+=(python3)
command -v setfacl >/dev/null || need+=(acl)
# the remote tier's tests and `bench remote` start their own memcached on loopback.
command -v memcached >/dev/null || need+=(memcached)
# `bench web`: nginx serves the pages, wrk measures them.
command -v nginx >/dev/null || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
# fincore: the page-cache tests (BACKING's and the SSD cache file's residency).
command -v fincore >/dev/null || need+=(util-linux-extra)
# mkfs.ext4 and chattr: the inode-reuse test's ext4 loop image, the immutable-file test.
{ command -v mkfs.ext4 && command -v chattr; } >/dev/null || need+=(e2fsprogs)
# dpkg-deb builds the Debian package (scripts/package.sh).
command -v dpkg-deb >/dev/null || need+=(dpkg)
if ((${#need[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# promtool checks the alert rules and the dashboard's queries. Debian ships it only in
# `prometheus` (the server too; nothing here starts it): without recommends (exporters).
if ! command -v promtool >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: prometheus (for promtool)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v cargo-nextest >/dev/null && ! cargo nextest --version >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi
