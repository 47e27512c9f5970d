#!/usr/bin/env bash
# Copies the header-only dependencies (cxxopts, nlohmann/json, doctest) into .deps/include,
# for a machine without a package registry (the lent GPU machine). Run it here, then carry
# .deps along: the build there uses EXTRA_CFLAGS=-I.deps/include (scripts/gpu_check.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --check >/dev/null || bash scripts/setup.sh
mkdir -p .deps/include
cp /usr/include/cxxopts.hpp .deps/include/
cp -r /usr/include/nlohmann .deps/include/
cp -r /usr/include/doctest .deps/include/
echo "gpu_deps: $(du -sh .deps | cut -f1) in .deps/include (cxxopts.hpp, nlohmann/, doctest/)"
