#!/usr/bin/env bash
# Installs the Debian packages train_gpt builds against, when they are missing.
# Fast and silent when everything is present, so `make` can call it every time.
#   scripts/setup.sh          install what is missing (apt-get; sudo when not root)
#   scripts/setup.sh --check  only report; exit 1 when something is missing
set -euo pipefail

# package : a file it provides
need=(
  "libcxxopts-dev:/usr/include/cxxopts.hpp"
  "nlohmann-json3-dev:/usr/include/nlohmann/json.hpp"
  "doctest-dev:/usr/include/doctest/doctest.h"
  "libopenblas-dev:/usr/include/x86_64-linux-gnu/cblas.h"
  "libopenmpi-dev:/usr/include/x86_64-linux-gnu/openmpi/mpi.h"
  "openmpi-bin:/usr/bin/mpirun"
  "python3-matplotlib:/usr/lib/python3/dist-packages/matplotlib/__init__.py"
)
# cblas.h lives under the multiarch folder on x86-64 and arm64 alike.
arch_dir=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

missing=()
for entry in "${need[@]}"; do
  pkg=${entry%%:*}
  file=${entry#*:}
  file=${file//x86_64-linux-gnu/$arch_dir}
  if [ ! -e "$file" ]; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  echo "missing packages: ${missing[*]}"
  exit 1
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
