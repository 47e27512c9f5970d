#!/usr/bin/env bash
# Builds the sm_90 binaries here exactly as scripts/gpu/gpu_check.sh builds them on the GPU
# machine (its env and build stages alone, into build/gpu-sm90), then keeps stripped, gzipped
# copies in .prebuilt/ (git ignores it; about 10 MB) with a SOURCE line naming the commit and
# the compilers. Carried to the lent machine beside .deps, they are gpu_check's fallback when
# that machine's newer compiler cannot build a target: the GPU stages still run, and the
# summary says which binaries came from here. Where .anchors/llm.c is there
# (scripts/gpu/llmc_prepare.sh), also llm.c's train_gpt2cu for sm_90, plain and with cuDNN
# (llmc_build of scripts/gpu/gpu_check_llmc.sh, as the llmc stage builds them there), kept as
# .prebuilt/llmc_train_gpt2cu_{plain,cudnn}.gz: the stage takes them before building its own
# (a minute or two of the call's time). A failed llm.c build is a line, not a failure.
# Where .deps/include holds the cudnn-frontend headers (gpu_deps.sh), the binaries have cuDNN's
# attention built in (cuda.attention=cudnn|auto; libcudnn is opened there at run time).
#
#   bash scripts/gpu/gpu_prebuild.sh        (after scripts/gpu/gpu_deps.sh; about 6 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$out" "$work"' EXIT
bash scripts/gpu/gpu_check.sh --stages none --out "$out" --work "$work" >/dev/null
grep -q 'build (sm_90, make -k)\*\*: ok' "$out/summary.md" || {
  cat "$out/summary.md" >&2
  echo "gpu_prebuild: the build failed here; nothing kept" >&2
  exit 1
}
rm -rf .prebuilt
mkdir -p .prebuilt
for name in train_gpt libtrain_gpt_cuda.so run_tests; do
  strip -o ".prebuilt/$name" "build/gpu-sm90/$name"
  gzip -9 ".prebuilt/$name"
done
llmc=""
if [ -f .anchors/llm.c/train_gpt2.cu ]; then
  ROOT=$PWD
  CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
  # shellcheck source=scripts/gpu/gpu_check_llmc.sh
  . scripts/gpu/gpu_check_llmc.sh
  for v in plain cudnn; do
    if llmc_build $v "$work/llmc_$v" "$work/llmc_$v.log"; then
      strip -o ".prebuilt/llmc_train_gpt2cu_$v" "$work/llmc_$v/train_gpt2cu"
      gzip -9 ".prebuilt/llmc_train_gpt2cu_$v"
      llmc+=" $v"
    else
      echo "gpu_prebuild: llm.c's $v build failed here (the llmc stage builds it there):" >&2
      grep -m3 -E 'error|Error' "$work/llmc_$v.log" >&2 || tail -3 "$work/llmc_$v.log" >&2
    fi
  done
fi
rev=$(git rev-parse --short HEAD)
git diff --quiet HEAD || rev+=" with local changes"
echo "built on $(hostname) $(date -u +%FT%TZ) from commit $rev with g++ $(g++ -dumpfullversion)," \
  "$(nvcc --version | grep -o 'release [0-9.]*')${llmc:+; llm.c:$llmc}" >.prebuilt/SOURCE
echo "gpu_prebuild: $(du -sh .prebuilt | cut -f1) in .prebuilt: $(cat .prebuilt/SOURCE)"
