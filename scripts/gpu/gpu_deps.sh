#!/usr/bin/env bash
# Copies the header-only dependencies (cxxopts, nlohmann/json, doctest, and the Boost.Math
# headers src/report/stats.cpp includes) into .deps/include, and the two compiled libraries
# the GPT-2 tokenizer links (PCRE2's 8-bit library and OpenSSL's libcrypto, with their
# headers; the libraries in .deps/lib, found at run time through the binary's rpath), for a
# machine without a package registry (the lent GPU machine). Run it here, then carry .deps along: the build there uses
# EXTRA_CFLAGS=-I.deps/include (scripts/gpu/gpu_check.sh does).
#
# Boost: only the headers that src/report/stats.cpp's compile reads (its dependency list from the
# compiler, g++ at C++17 and C++20, and clang++ where it is installed, whose configuration
# headers differ), not all of /usr/include/boost (about 4 MB of its 160).
set -euo pipefail
cd "$(dirname "$0")/../.."
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

# PCRE2 and libcrypto: the headers and the shared libraries themselves (the machine may have
# other versions, or none).
copy_lib() {  # copy_lib NAME SONAME: .deps/lib/SONAME, and NAME.so pointing to it
  cp -L "$(g++ -print-file-name=$1.so)" .deps/lib/$2
  ln -s $2 .deps/lib/$1.so
}
rm -rf .deps/lib
mkdir -p .deps/lib .deps/include/openssl
cp /usr/include/pcre2.h .deps/include/
cp /usr/include/openssl/*.h .deps/include/openssl/
cp /usr/include/"$(gcc -dumpmachine)"/openssl/*.h .deps/include/openssl/
copy_lib libpcre2-8 libpcre2-8.so.0
copy_lib libcrypto libcrypto.so.3
echo "gpu_deps: $(du -sh .deps | cut -f1) in .deps (cxxopts.hpp, nlohmann/, doctest/, ${#boost[@]} Boost headers, pcre2.h, openssl/, lib/: libpcre2-8, libcrypto)"
