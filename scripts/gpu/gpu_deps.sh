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
# cuDNN's fused attention (src/backends/cuda/attention_cudnn.cu): the header-only cudnn-frontend,
# pinned (the version scripts/gpu/llmc_prepare.sh gives llm.c) and checked against the sha256 of
# its wheel as downloaded when it was pinned, and cuDNN's own headers (cudnn*.h) from this
# machine's toolkit, so that the build there finds both in .deps/include (the Makefile then
# compiles the file with TG_CUDNN). libcudnn itself is not copied: the binary opens the GPU
# machine's (PyTorch's nvidia-cudnn-cu13 wheel, or the toolkit's) at run time. Without pip or
# the network, or with another hash, the build there goes on without cuDNN (said here).
FRONTEND_VERSION=1.32.0
FRONTEND_SHA256=8b354a8e550c083eb247f1eb39a7d69a4a269075f5a01e4fcbd2531680b17239
FRONTEND_WHEEL=nvidia_cudnn_frontend-$FRONTEND_VERSION-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
cudnn_frontend() {
  local tmp whl sum
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: tmp is local
  trap "rm -rf '$tmp'" RETURN
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --dest "$tmp" "nvidia-cudnn-frontend==$FRONTEND_VERSION" \
    >"$tmp/pip.log" 2>&1; then
    tail -3 "$tmp/pip.log" >&2
    echo "gpu_deps: cudnn-frontend $FRONTEND_VERSION not fetched (pip): the build there has no cuDNN attention" >&2
    return 0
  fi
  whl=$tmp/$FRONTEND_WHEEL
  sum=$(sha256sum "$whl" 2>/dev/null | cut -d' ' -f1)
  if [ "$sum" != "$FRONTEND_SHA256" ]; then
    echo "gpu_deps: $FRONTEND_WHEEL has sha256 ${sum:-none}, not the pinned $FRONTEND_SHA256: left out" >&2
    return 0
  fi
  python3 - "$whl" .deps <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
  local inc
  inc=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/include
  if compgen -G "$inc/cudnn*.h" >/dev/null; then
    cp "$inc"/cudnn*.h .deps/include/
  else
    echo "gpu_deps: no cudnn.h in $inc: the build there needs its toolkit's (or has no cuDNN attention)" >&2
  fi
  echo "gpu_deps: cudnn-frontend $FRONTEND_VERSION (sha256 checked)$([ -f .deps/include/cudnn.h ] && echo ", cudnn.h $(grep -m3 -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' .deps/include/cudnn_version.h | awk '{print $3}' | paste -sd.)")"
}
cudnn_frontend

echo "gpu_deps: $(du -sh .deps | cut -f1) in .deps (cxxopts.hpp, nlohmann/, doctest/, ${#boost[@]} Boost headers, pcre2.h, openssl/, lib/: libpcre2-8, libcrypto, cudnn-frontend)"
