#!/usr/bin/env bash
# Copies the header-only dependencies (cxxopts, nlohmann/json, doctest, and the Boost.Math
# headers src/report/stats.cpp includes) into .deps/include, and PCRE2 (pcre2.h, the 8-bit
# library as .deps/lib/libpcre2-8.so, found at run time through the binary's rpath) for the
# GPT-2 tokenizer, for a machine without a package registry (the lent GPU machine). Run it here, then carry .deps along: the build there uses
# EXTRA_CFLAGS=-I.deps/include (scripts/gpu_check.sh does).
#
# Boost: only the headers that src/report/stats.cpp's compile reads (its dependency list from the
# compiler, g++ at C++17 and C++20, and clang++ where it is installed, whose configuration
# headers differ), not all of /usr/include/boost (about 4 MB of its 160).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --check >/dev/null || bash scripts/setup.sh
rm -rf .deps/include
mkdir -p .deps/include
cp /usr/include/cxxopts.hpp .deps/include/
cp -r /usr/include/nlohmann .deps/include/
cp -r /usr/include/doctest .deps/include/

# Every header under /usr/include/boost/ that a compile of src/report/stats.cpp reads (-M lists
# the system headers too; -MM would leave Boost out).
boost_headers() {
  local cxx std
  for cxx in g++ clang++; do
    command -v "$cxx" >/dev/null 2>&1 || continue
    for std in c++17 c++20; do
      "$cxx" -std=$std -fopenmp -I. -M src/report/stats.cpp
    done
  done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u
}
mapfile -t boost < <(boost_headers)
if [ ${#boost[@]} -eq 0 ]; then
  echo "gpu_deps: no Boost header found in src/report/stats.cpp's dependencies (is libboost-dev installed?)" >&2
  exit 1
fi
( cd /usr/include && cp --parents "${boost[@]#/usr/include/}" "$OLDPWD/.deps/include/" )

# PCRE2: the header and the shared library itself (the machine may have only an older one).
pcre2=$(g++ -print-file-name=libpcre2-8.so)
rm -rf .deps/lib
mkdir -p .deps/lib
cp /usr/include/pcre2.h .deps/include/
cp -L "$pcre2" .deps/lib/libpcre2-8.so.0
ln -s libpcre2-8.so.0 .deps/lib/libpcre2-8.so
echo "gpu_deps: $(du -sh .deps | cut -f1) in .deps (cxxopts.hpp, nlohmann/, doctest/, ${#boost[@]} Boost headers, pcre2.h, lib/libpcre2-8.so)"
