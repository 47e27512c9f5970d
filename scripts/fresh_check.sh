#!/usr/bin/env bash
# The README's two commands on a fresh machine: builds a clean Debian 12 root with
# debootstrap, adds what this project's machine image has that can collide with our
# packages (netlib's libblas-dev and liblapack-dev, whose cblas.h and libblas.so win the
# alternatives until OpenBLAS arrives), copies a clean clone of HEAD in and runs
# `make run` and `make test` there (a CPU build: the root has no CUDA toolkit).
#
# After scripts/setup.sh has installed OpenBLAS inside the root, the alternatives are
# pointed back at netlib, so the build proves it uses OpenBLAS's own header folder and
# library, not whatever cblas.h happens to point to.
#
#   scripts/fresh_check.sh [--root DIR] [--keep] [--reuse]
#     --root DIR  where the root goes (default build/fresh-root; needs root privileges)
#     --keep      leave the root in place afterwards (default: removed on success)
#     --reuse     reuse an existing root's base system (skips debootstrap)
#
# Needs root (debootstrap, chroot, mount) and Debian's package registry. Takes about
# 10-20 minutes on 2 cores; ends with "fresh_check: PASS" or names the step that failed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

root="$repo/build/fresh-root"
keep=0
reuse=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$(realpath -m "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    --reuse) reuse=1; shift ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    *) echo "fresh_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" -ne 0 ]; then
  echo "fresh_check: needs root (debootstrap, chroot, mount)" >&2
  exit 2
fi

step() { echo "fresh_check: == $* ($(date +%H:%M:%S))"; }
fail() { echo "fresh_check: FAIL: $*" >&2; exit 1; }

# The Debian mirror this machine's apt already uses (first URI of the main archive).
mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1 || true)
if [ -z "$mirror" ]; then
  mirror=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | head -n1 || true)
fi
[ -n "$mirror" ] || fail "no Debian mirror found in /etc/apt/sources.list{,.d}"

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

if ! command -v debootstrap >/dev/null 2>&1; then
  step "installing debootstrap"
  apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null || fail "cannot install debootstrap"
fi

if [ "$reuse" -eq 1 ] && [ -x "$root/bin/bash" ]; then
  step "reusing the base system in $root"
else
  step "debootstrap bookworm into $root"
  rm -rf "$root"
  mkdir -p "$root"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
    fail "debootstrap failed (log: $root.debootstrap.log)"
fi

for m in proc sys dev dev/pts dev/shm; do
  mkdir -p "$root/$m"
  mount --bind "/$m" "$root/$m"
  mounted+=("$root/$m")
done
# Name resolution as on a real machine: the file:// rendezvous tests resolve this host's name.
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp /etc/hosts "$root/etc/hosts" 2>/dev/null || true
cp /etc/hostname "$root/etc/hostname" 2>/dev/null || true

in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  DEBIAN_FRONTEND=noninteractive bash -c "$1"; }

step "the machine image's colliding packages and the tools a user starts with"
# What this project's machines have before setup.sh runs: a compiler, make, git, python3
# and netlib BLAS/LAPACK (the cause of the fresh-machine build failure).
in_root "apt-get update -qq && apt-get install -y -qq --no-install-recommends \
  g++ make git ca-certificates python3 libblas-dev liblapack-dev >/dev/null" ||
  fail "installing the base tools in the root"
in_root "readlink -f /usr/include/x86_64-linux-gnu/cblas.h"

step "a clean clone of HEAD ($(git rev-parse --short HEAD))"
rm -rf "$root/work/train_gpt"
mkdir -p "$root/work"
git clone -q --no-hardlinks "$repo" "$root/work/train_gpt"
# make run must not depend on ../shared; make test may use ../shared/data as CI has it.
if [ -d "$repo/../shared/data" ]; then
  mkdir -p "$root/work/shared"
  cp -r "$repo/../shared/data" "$root/work/shared/"
fi

step "make deps (scripts/setup.sh installs the packages)"
in_root "cd /work/train_gpt && make deps" || fail "scripts/setup.sh failed in the fresh root"

step "alternatives pointed back at netlib (cblas.h and libblas.so as the image has them)"
in_root "update-alternatives --set libblas.so-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/blas/libblas.so >/dev/null &&
  readlink -f /usr/include/x86_64-linux-gnu/cblas.h" || fail "cannot set the netlib alternatives"

step "make run"
in_root "cd /work/train_gpt && make run" 2>&1 | tee "$root.make_run.log" | tail -n 8
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "make run failed (log: $root.make_run.log)"

step "make test"
in_root "cd /work/train_gpt && make test" 2>&1 | tee "$root.make_test.log" | tail -n 3
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "make test failed (log: $root.make_test.log)"
grep -Eq '^[0-9]+ passed, 0 failed' "$root.make_test.log" || fail "make test did not end with 'N passed, 0 failed'"

cleanup
mounted=()
if [ "$keep" -eq 0 ]; then rm -rf "$root"; fi
step "done"
echo "fresh_check: PASS"
