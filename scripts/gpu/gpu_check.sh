#!/usr/bin/env bash
# gpu_check.sh: the one command for a machine with a GPU and no package registry (the lent
# H100 or H200): environment, build, the FP8 discriminator, the per-op profile, benchmarks
# against PyTorch and llm.c, ncu on the slowest kernels, CUDA tests, GPU-vs-CPU parity, the
# opt-in paths and compute-sanitizer, all inside one deadline, so one call brings back the
# evidence.
#
#   bash scripts/gpu/gpu_check.sh [--deadline S] [--out DIR] [--work DIR] [--build DIR]
#                             [--stages LIST] [--jobs N]
#
#   --deadline S    the whole run ends within S seconds (default 540, for a 600 s call)
#   --out DIR       what comes back (default $OUT, else runs/gpu_check)
#   --work DIR      logs, data and run folders (default runs/gpu_check_work; not inside --out)
#   --build DIR     the sm_90 build folder (default build/gpu-sm90; kept, so a second call on
#                   a warm machine rebuilds only what changed)
#   --stages LIST   which of probe,fp8,profile,bench,torch,llmc,ncu,tests,parity,extras,
#                   sanitizer run (default: all);
#                   env and build always run (a current build takes seconds)
#   --jobs N        make -j and the tests' OpenMP threads (default: nproc)
#   --prebuilt      no build: the binaries of .prebuilt/ (scripts/gpu/gpu_prebuild.sh), for a
#                   short second call once the build is known to work there
#
# Needs .deps/include (scripts/gpu/gpu_deps.sh, run where the header packages are; carry .deps);
# the llmc stage needs .anchors/llm.c (scripts/gpu/llmc_prepare.sh, run here; carry .anchors).
#
# Stages, in this order: the most telling first, so that the deadline cuts the least telling
# (the issue's order: the FP8 discriminator, the profiles, the benches beside PyTorch and
# llm.c; the sanitizers last). Each is independent: it runs under `timeout min(its own limit, its
# stage's cap, time left)`; a failure is a FAILED line and the next stage runs; a stage with
# too little time left is skipped with a line. Without a GPU (a dry run) the GPU stages say
# "skipped: no GPU"; the build really builds, and the CUDA tests run (their cases skip).
#   env        nvidia-smi, nvcc, g++, cuBLASLt, NCCL (the toolkit's, else the nvidia-nccl-cu13
#              wheel, linked into WORK/nccl for NCCL_HOME), compute-sanitizer, python/torch
#   build      sm_90 only, make -k, NO_BLAS NO_MPI SKIP_SETUP, headers from .deps/include;
#              which of train_gpt, libtrain_gpt_cuda.so, run_tests are built and current
#              (a target it cannot make is taken from .prebuilt/, scripts/gpu/gpu_prebuild.sh, if
#              that is there: said on the stage's line, and the build stays FAILED)
#   probe      scripts/gpu/cublaslt_probe.cu: the heuristic's answers for the GEMM configurations
#              the backend uses, and the FP8 forward GEMM launched with each algorithm
#   fp8        the per-tensor FP8 refusal settled (scripts/gpu/gpu_check_fp8.sh): the probe's FP8
#              launches, torch._scaled_mm on the same shapes and one train_gpt fp8 step, each
#              under cuBLASLt's log; which ran, in fp8.md
#   profile    train_gpt bench --profile, GPT-2 124M bf16 and fp8 at B 8 x T 1024: every op of
#              a step timed with CUDA events against its floor (docs/gpu.md), the slowest
#              rows in profile.md
#   bench      train_gpt bench, B 8 x T 1024: GPT-2 124M bf16, fp8, fp16; 350M bf16, fp8
#              (a process each; cuda.attention's default, auto: the start-up lines say which
#              path); then 124M bf16 with each attention path named, cublas and cudnn
#              (cuDNN's fused attention), side by side
#   torch      scripts/gpu/torch_gpt2_bench.py: the same model and B x T in PyTorch (eager, then
#              torch.compile), the headline ratio; without a GPU its CPU smoke test
#   llmc       llm.c's train_gpt2cu (plain and cuDNN builds, .prebuilt's or built here) at the
#              same model and B x T on the same text's shards: tokens/s beside train_gpt bf16
#              and PyTorch, a table in bench.md and summary.md (scripts/gpu/gpu_check_llmc.sh)
#   ncu        the five slowest kernels of a bf16 step, by ncu's durations, and their DRAM
#              bandwidth and SM throughput, a table in profile.md (scripts/gpu/gpu_check_llmc.sh)
#   tests      tests/cuda/test_*.cu, one process per file; a crashed file again case by case
#              under CUDA_LAUNCH_BLOCKING=1, naming the case
#   parity     the toy model on cuda and on cpu in fp32, bf16, fp8, fp8-block, mxfp8 (attention
#              cublas against the CPU's reference): the max relative loss gap per mode, and the
#              GEMM path the cuda run took; then bf16 with cuda.attention=cudnn against the
#              CPU's lse twin: cudnn passes within twice the bf16 row's gap (cublas against
#              the CPU's reference) over the first ten steps (at least 2e-3)
#   extras     block-scaled recipes under CUBLASLT_LOG_LEVEL=1 with their GEMM-path lines
#   sanitizer  memcheck, racecheck, synccheck, initcheck on small kernel cases
#
# What lands in --out (8 files, each rewritten as the run goes, so a kill at the limit leaves
# the latest): summary.md (a line per stage with its result and seconds, the key numbers
# under it, the headline ratio and the table beside PyTorch and llm.c; printed after every
# stage), logs.tgz (every log of the work folder, no data or checkpoints), bench.md (the bench
# tables and path lines, llm.c's rows and the comparison), torch_bench.json, tests.md (per
# test file, and the sanitizer), parity.md (the parity table), profile.md (the per-op
# profile's tables, then ncu's kernel table), fp8.md (the fp8 stage's findings).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

DEADLINE=540
OUTDIR=${OUT:-runs/gpu_check}
WORK=runs/gpu_check_work
BUILD=build/gpu-sm90
JOBS=$(nproc)
STAGES=probe,fp8,profile,bench,torch,llmc,ncu,tests,parity,extras,sanitizer
PREBUILT_ONLY=0
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --deadline) DEADLINE=$2; shift 2 ;;
    --deadline=*) DEADLINE=${1#*=}; shift ;;
    --out) OUTDIR=$2; shift 2 ;;
    --out=*) OUTDIR=${1#*=}; shift ;;
    --work) WORK=$2; shift 2 ;;
    --work=*) WORK=${1#*=}; shift ;;
    --build) BUILD=$2; shift 2 ;;
    --build=*) BUILD=${1#*=}; shift ;;
    --stages) STAGES=$2; shift 2 ;;
    --stages=*) STAGES=${1#*=}; shift ;;
    --jobs) JOBS=$2; shift 2 ;;
    --jobs=*) JOBS=${1#*=}; shift ;;
    --prebuilt) PREBUILT_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $DEADLINE =~ ^[0-9]+$ ]] || { echo "gpu_check: --deadline takes seconds" >&2; exit 2; }

T0=$(date +%s)
mkdir -p "$OUTDIR" "$WORK"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(cd "$WORK" && pwd)
# The build folder relative to the repository, as the Makefile's dependency files name it.
BUILD=$(realpath -m --relative-to="$ROOT" "$BUILD")
case $WORK/ in "$OUTDIR"/*) echo "gpu_check: --work must be outside --out" >&2; exit 2 ;; esac
LOGS=$WORK/logs
STATE=$WORK/state  # what stages tell later stages (env.sh) and the stage in flight
rm -rf "$LOGS" "$STATE" "$WORK/runs"
mkdir -p "$LOGS" "$STATE" "$WORK/runs"
SUMMARY=$OUTDIR/summary.md
rm -f "$OUTDIR"/{summary.md,logs.tgz,bench.md,torch_bench.json,tests.md,parity.md,profile.md,fp8.md}
REPORT="python3 $ROOT/scripts/gpu/gpu_check_report.py"
# shellcheck source=scripts/gpu/gpu_check_fp8.sh
. "$ROOT/scripts/gpu/gpu_check_fp8.sh"
# shellcheck source=scripts/gpu/gpu_check_llmc.sh
. "$ROOT/scripts/gpu/gpu_check_llmc.sh"
export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1

# ---------------------------------------------------------------- time and the summary

now() { date +%s; }
left() { echo $((T0 + DEADLINE - $(now))); }
STAGE_END=0  # when the stage in flight must end (its cap), in epoch seconds
# Seconds a run may take: its own limit, cut to the stage's cap and to the time left less a
# reserve for packing the logs.
limit() {
  local own=$1 l=$(($(left) - 8)) s=$((STAGE_END - $(now)))
  [ $s -lt $l ] && l=$s
  echo $((own < l ? own : l))
}

# run_limited LIMIT LOG CMD...: CMD under timeout, stdout+stderr appended to LOG; returns
# CMD's status, 124 when the limit ended it. timeout signals the whole process group.
run_limited() {
  local lim=$1 log=$2; shift 2
  echo "+ [limit ${lim}s] $*" >>"$log"
  timeout -k 5 "$lim" "$@" >>"$log" 2>&1
}

# For stages: key numbers go under the stage's line; result says how the stage ended.
key() { printf '%s\n' "$@" >>"$STATE/keys"; }
result() { printf '%s' "$*" >"$STATE/result"; }
fact() { printf 'export %s=%q\n' "$1" "$2" >>"$STATE/env.sh"; }  # a variable for later stages

# Logs larger than 8 MiB keep their first and last 4 MiB (16 MiB per returned file).
pack_logs() {
  local f
  find "$LOGS" -type f -size +8M | while read -r f; do
    { head -c 4M "$f"; printf '\n[... cut by gpu_check ...]\n'; tail -c 4M "$f"; } >"$f.cut" &&
      mv "$f.cut" "$f"
  done
  tar -czf "$OUTDIR/.logs.tgz" -C "$WORK" logs 2>/dev/null && mv "$OUTDIR/.logs.tgz" "$OUTDIR/logs.tgz"
}

# stage ID TITLE NEED CAP FUNCTION: runs FUNCTION in a subshell (an error there ends the
# stage, not the script) with the facts of earlier stages, for at most CAP seconds, unless
# fewer than NEED seconds are left or --stages leaves it out; then appends the stage's line
# and key numbers to summary.md, packs the logs and prints summary.md.
stage() {
  local id=$1 name="$2" need=$3 cap=$4 fn=$5 t rc res
  : >"$STATE/keys"
  rm -f "$STATE/result"
  t=$(now)
  STAGE_END=$((t + cap))
  if [[ $id != env && $id != build && ,$STAGES, != *,$id,* ]]; then
    result "not asked for (--stages $STAGES)"
  elif [ "$(left)" -lt "$need" ]; then
    result "skipped: out of time ($(left) s left, needs about $need)"
  else
    echo "== $id $name ($(left) s left)"
    ( source "$STATE/env.sh"; "$fn" )
    rc=$?
    [ -s "$STATE/result" ] || result "FAILED (the stage itself ended with status $rc)"
  fi
  res=$(cat "$STATE/result")
  printf -- '- **%s**: %s (%d s)\n' "$id $name" "$res" $(($(now) - t)) >>"$SUMMARY"
  sed 's/^/  - /' "$STATE/keys" >>"$SUMMARY"
  pack_logs
  echo
  cat "$SUMMARY"
  echo
}

# ---------------------------------------------------------------- 1. environment

find_lib() {  # find_lib NAME DIR...: the first NAME* file found in the DIRs
  local n=$1; shift
  find "$@" -maxdepth 1 -name "$n*" 2>/dev/null | sort | head -1
}

# NCCL: the toolkit's header and library, else the nvidia-nccl-cu13 wheel (a namespace
# package: its folder comes from find_spec's submodule_search_locations, __file__ is None).
# The wheel ships only libnccl.so.2; the Makefile's -lnccl wants libnccl.so, so WORK/nccl
# holds links to both and to the include folder, and NCCL_HOME points there.
find_nccl() {
  local log=$1 wheel so
  if [ -f "$CUDA_HOME/include/nccl.h" ] &&
    so=$(find_lib libnccl.so.2 "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu) &&
    { [ -n "$so" ] || ! grep -q -- '-lnccl' "$ROOT/Makefile"; }; then
    echo "NCCL: toolkit ($CUDA_HOME/include/nccl.h, $so)" >>"$log"
    fact NCCL_MAKE "NCCL_HOME=$CUDA_HOME"
    key "NCCL: the toolkit's header, library ${so:-not found (the build opens it at run time)}"
    return
  fi
  wheel=$(python3 - 2>>"$log" <<'PY'
import importlib.util
try:
    s = importlib.util.find_spec("nvidia.nccl")
    print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else "")
except ModuleNotFoundError:
    print("")
PY
)
  so=$( [ -n "$wheel" ] && find_lib libnccl.so.2 "$wheel/lib")
  if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ] && [ -n "$so" ]; then
    mkdir -p "$WORK/nccl/lib"
    ln -sfn "$wheel/include" "$WORK/nccl/include"
    ln -sf "$so" "$WORK/nccl/lib/libnccl.so"
    ln -sf "$so" "$WORK/nccl/lib/libnccl.so.2"
    echo "NCCL: wheel $wheel ($so), linked into $WORK/nccl" >>"$log"
    fact NCCL_MAKE "NCCL_HOME=$WORK/nccl"
    fact LD_LIBRARY_PATH "$WORK/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH=$WORK/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # find_cudnn adds to it
    key "NCCL: pip wheel nvidia-nccl-cu13 at $wheel (NCCL_HOME=$WORK/nccl)"
  else
    echo "NCCL: neither $CUDA_HOME/include/nccl.h + libnccl.so.2 nor the wheel (wheel dir: '${wheel}')" >>"$log"
    fact NCCL_MAKE "NO_NCCL=1"
    key "NCCL: not found, built with NO_NCCL=1 (test_nccl.cu has nothing to run)"
  fi
}

# cuDNN for cuda.attention=cudnn|auto: the library train_gpt opens at run time (the toolkit's,
# else the nvidia-cudnn-cu13 wheel that PyTorch brings, whose lib folder then goes on
# LD_LIBRARY_PATH), and whether the build has the cudnn-frontend headers (.deps/include,
# scripts/gpu/gpu_deps.sh). Said as a key line; the start-up lines of the runs say what ran.
find_cudnn() {
  local log=$1 so wheel fe
  so=$(find_lib libcudnn.so.9 "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu)
  if [ -z "$so" ]; then
    wheel=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.cudnn"); print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else "")' 2>>"$log")
    so=$( [ -n "$wheel" ] && find_lib libcudnn.so.9 "$wheel/lib")
    [ -z "$so" ] || fact LD_LIBRARY_PATH "${so%/*}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  fe=$(grep -m1 -o 'CUDNN_FRONTEND_MINOR_VERSION [0-9]*' "$ROOT/.deps/include/cudnn_frontend_version.h" 2>/dev/null)
  echo "cuDNN: library ${so:-not found}; cudnn-frontend ${fe:-not in .deps/include}" >>"$log"
  key "cuDNN: ${so:-libcudnn.so.9 not found (toolkit or nvidia-cudnn-cu13 wheel)}; cudnn-frontend: ${fe:+1.${fe##* }}${fe:-none (run scripts/gpu/gpu_deps.sh here, carry .deps): built without cuDNN}"
}

stage_env() {
  local log=$LOGS/env.txt nvcc gpu py torch_line san
  {
    echo "gpu_check $(date -u +%FT%TZ) on $(hostname), $(uname -sr), $(nproc) CPUs"
    echo "deadline ${DEADLINE}s, out $OUTDIR, work $WORK, build $BUILD, jobs $JOBS"
    free -g | head -2
  } >"$log"
  # The GPU: name, driver, memory, clocks (read only; the card's settings are left alone).
  # Whether there is one is nvidia-smi -L's answer; the query only describes it.
  if nvidia-smi -L >>"$log" 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,temperature.gpu,power.draw,power.limit,persistence_mode,compute_mode \
      --format=csv 2>&1)
    echo "$gpu" >>"$log"
    nvidia-smi >>"$log" 2>&1
    nvidia-smi -q >"$LOGS/nvidia-smi-q.txt" 2>&1
    fact GPU 1
    fact GPU_NAME "$(nvidia-smi -L | head -1 | sed 's/^GPU 0: //; s/ (UUID.*//')"
    key "GPU: $(echo "$gpu" | sed -n 2p)" "  (columns: $(echo "$gpu" | head -1))"
  else
    echo "nvidia-smi: no GPU" >>"$log"
    fact GPU 0
    key "GPU: none (nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'found no GPU' || echo 'not installed'))"
  fi
  # Compilers and CUDA libraries.
  nvcc=$(command -v nvcc || true)
  CUDA_HOME=${nvcc%/bin/nvcc}
  fact CUDA_HOME "$CUDA_HOME"
  { nvcc --version; g++ --version; make --version | head -1; } >>"$log" 2>&1
  key "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'not found'); g++: $(g++ -dumpfullversion 2>/dev/null)"
  local lt
  lt=$(find_lib libcublasLt.so "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib")
  echo "cuBLASLt: ${lt:-not found} (header: $(ls "$CUDA_HOME"/include/cublasLt.h 2>/dev/null || echo none))" >>"$log"
  key "cuBLASLt: ${lt:-not found under $CUDA_HOME}"
  find_nccl "$log"
  find_cudnn "$log"
  # Header-only dependencies (the machine has no package registry).
  local d missing=""
  for d in cxxopts.hpp nlohmann/json.hpp doctest/doctest.h boost/math/distributions/students_t.hpp; do
    [ -f "$ROOT/.deps/include/$d" ] || [ -f "/usr/include/$d" ] || missing+=" $d"
  done
  [ -z "$missing" ] || key "MISSING headers:$missing (run scripts/gpu/gpu_deps.sh here, carry .deps)"
  # Tools.
  san=$(compute-sanitizer --version 2>/dev/null | grep -io 'version [0-9.]*' | head -1)
  if [ -n "$san" ]; then fact SANITIZER 1; else fact SANITIZER 0; fi
  key "compute-sanitizer: ${san:-not found}; ncu: $(ncu --version 2>/dev/null | tail -1 | grep . || echo 'not found')"
  { compute-sanitizer --version; ncu --version; } >>"$log" 2>&1
  # Python: the one that runs the PyTorch baseline, else a python3 with torch for the smoke test.
  py=""
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
  done
  fact TORCH_PY "$py"
  if [ -n "$py" ]; then
    torch_line=$("$py" -c 'import sys, torch; print(f"python {sys.version.split()[0]} ({sys.executable}), torch {torch.__version__}, CUDA {torch.version.cuda}, sees GPU: {torch.cuda.is_available()}")' 2>&1 | tail -1)
  else
    torch_line="python $(python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null): no torch (python3 and /usr/bin/python3 tried)"
  fi
  echo "$torch_line" >>"$log"
  key "$torch_line"
  result "ok"
}

# ---------------------------------------------------------------- 2. build (sm_90 only)

make_vars() {  # the build's make variables, one per line
  printf '%s\n' CUDA=1 NO_BLAS=1 NO_MPI=1 SKIP_SETUP=1 "EXTRA_CFLAGS=-I$ROOT/.deps/include" \
    "BUILD=$BUILD" "CUDA_ARCHS=-gencode arch=compute_90,code=sm_90" "${NCCL_MAKE:-NO_NCCL=1}"
}

# A target the build could not make, taken from .prebuilt/ (scripts/gpu/gpu_prebuild.sh, built on
# the development machine from the same tree, stripped and gzipped) so that the GPU stages
# still run; said on the stage's lines, and the build still counts as FAILED. The binaries'
# rpath names the development machine's .deps/lib: LD_LIBRARY_PATH names this one's.
use_prebuilt() {  # use_prebuilt "NAME NAME ...": the missing targets
  local name from=$ROOT/.prebuilt used=""
  [ -f "$from/SOURCE" ] || return 0
  for name in $1; do
    [ -f "$from/$name.gz" ] || continue
    gunzip -c "$from/$name.gz" >"$BUILD/$name" && chmod +x "$BUILD/$name" || continue
    fact "BUILT_$(echo "$name" | tr -c 'a-zA-Z0-9_\n' _)" 1
    used+=" $name"
  done
  [ -n "$used" ] || return 0
  local libs="$ROOT/.deps/lib:$CUDA_HOME/lib64:$CUDA_HOME/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
  fact LD_LIBRARY_PATH "$libs"
  PREBUILT=$used
  fact PREBUILT "$used"
  key "PREBUILT used for:$used ($(head -1 "$from/SOURCE"))"
  local missing_libs
  missing_libs=$(cd "$BUILD" && LD_LIBRARY_PATH="$libs" ldd $used 2>&1 | grep 'not found' |
    sort -u | xargs echo)
  [ -z "$missing_libs" ] || key "PREBUILT binaries miss libraries here: $missing_libs"
}

stage_build() {
  local log=$LOGS/build.log rc vars t built="" missing="" n
  if [ "$PREBUILT_ONLY" = 1 ]; then
    mkdir -p "$BUILD"
    use_prebuilt "train_gpt libtrain_gpt_cuda.so run_tests"
    result "not built (--prebuilt): the GPU stages use .prebuilt's${PREBUILT:- nothing (no .prebuilt/SOURCE)}"
    return
  fi
  mapfile -t vars < <(make_vars)
  local targets=("$BUILD/train_gpt" "$BUILD/libtrain_gpt_cuda.so" "$BUILD/run_tests")
  run_limited "$(limit 420)" "$log" make -k -j"$JOBS" "${vars[@]}" "${targets[@]}"
  rc=$?
  # Which targets are built and current (make -q: up to date), not left from an older build.
  for t in "${targets[@]}"; do
    if [ -f "$t" ] && make -q "${vars[@]}" "$t" >/dev/null 2>&1; then
      built+=" ${t##*/}"
      fact "BUILT_$(echo "${t##*/}" | tr -c 'a-zA-Z0-9_\n' _)" 1
    else
      missing+=" ${t##*/}"
    fi
  done
  # The machine code in the library: sm_90 cubins, nothing else (cuobjdump is on the GPU image).
  if [ -f "$BUILD/libtrain_gpt_cuda.so" ] && command -v cuobjdump >/dev/null; then
    key "device code: $(cuobjdump --list-elf "$BUILD/libtrain_gpt_cuda.so" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | xargs echo) (cubins by cuobjdump --list-elf)"
  fi
  n=$(grep -c 'warning' "$log")
  key "warnings: $n; make status $rc; log: logs/build.log"
  [ -z "$missing" ] || use_prebuilt "$missing"
  # The first compiler errors (gcc "file:line: error:", nvcc "file(line): error:") and make's
  # "*** [target] Error N" lines.
  grep -m3 -E 'error:|\*\*\* ' "$log" | cut -c1-240 >>"$STATE/keys"
  if [ "$rc" -eq 124 ]; then
    result "TIMED OUT (built:${built:- none}; not built:$missing)"
  elif [ -z "$missing" ]; then
    result "ok (built:$built)"
  else
    result "FAILED (built:${built:- none}; not built:$missing)"
  fi
  [ -z "${PREBUILT:-}" ] || result "$(cat "$STATE/result"); the GPU stages use .prebuilt's$PREBUILT"
}

# ---------------------------------------------------------------- the cuBLASLt probe

# scripts/gpu/cublaslt_probe.cu: which GEMM configurations cuBLASLt's heuristic serves here and
# whether the FP8 forward GEMM launches with each offered algorithm (the first H200 run found
# train_gpt's per-tensor FP8 GEMMs refused while the heuristic alone served them).
stage_probe() {
  [ "${GPU:-0}" = 1 ] || { result "skipped: no GPU"; return; }
  local log=$LOGS/cublaslt_probe.txt lib=$CUDA_HOME/targets/x86_64-linux/lib
  run_limited "$(limit 60)" "$log" nvcc -O2 -arch=sm_90 scripts/gpu/cublaslt_probe.cu \
    -L"$lib" -L"$CUDA_HOME/lib64" -lcublasLt -Xlinker -rpath,"$lib:$CUDA_HOME/lib64" \
    -o "$WORK/cublaslt_probe" || { result "FAILED (nvcc; logs/cublaslt_probe.txt)"; return; }
  run_limited "$(limit 40)" "$log" "$WORK/cublaslt_probe" ||
    { result "FAILED (the probe; logs/cublaslt_probe.txt)"; return; }
  key "heuristic: $(grep -c ' | 0 -1 -1$' "$log") of $(grep -c '^[0-9].* | ' "$log") configurations without an algorithm"
  grep '^launch' "$log" | cut -c1-200 >>"$STATE/keys"
  result "ok (logs/cublaslt_probe.txt)"
}

# ---------------------------------------------------------------- 3. our bench

# The GEMM path a run took, from its own lines: the start-up line's "path: ..." (train and
# the fp8 bench print it) and the block-scaled self-checks (src/backends/cuda/matmul_native.cu), counted.
gemm_path() {
  local log=$1 p ok bad noalg
  p=$(grep -ho 'path: .*' "$log" 2>/dev/null | head -1 | cut -c1-120)
  ok=$(grep -c 'self-check against the portable path passed' "$log" 2>/dev/null)
  bad=$(grep -c 'failed its self-check' "$log" 2>/dev/null)
  noalg=$(grep -c 'cuBLASLt has no algorithm or refused' "$log" 2>/dev/null)
  printf '%s' "${p:-no path line}"
  [ "$ok$bad$noalg" = 000 ] || printf '; native self-checks: %s passed, %s failed; no algorithm: %s' "$ok" "$bad" "$noalg"
}

# bench_one NAME LIMIT ARGS...: one `train_gpt bench` process, its table appended to bench.md
# and its rows to the stage's key numbers; returns its status.
bench_one() {
  local name=$1 lim=$2; shift 2
  local log=$LOGS/bench_$name.log rc
  if [ "$(limit "$lim")" -lt 20 ]; then key "$name: skipped (out of time)"; return 124; fi
  run_limited "$(limit "$lim")" "$log" "$BUILD/train_gpt" bench --device=cuda "$@"
  rc=$?
  {
    echo "### $name: train_gpt bench --device=cuda $* (status $rc)"
    echo
    grep -E '^(fp8:|block-scaled GEMM|train_gpt bench|attention)' "$log" | awk '!seen[$0]++' | sed 's/^/    /'
    echo
    grep -E '^\|' "$log"
    echo
  } >>"$OUTDIR/bench.md"
  if [ "$rc" -eq 0 ]; then
    $REPORT bench "$log" >>"$STATE/keys"
  else
    key "$name: FAILED (status $rc$([ "$rc" -eq 124 ] && echo ', timed out')): $(grep -v '^+' "$log" | tail -1 | cut -c1-200)"
  fi
  grep -qE '^(fp8:|block-scaled GEMM)' "$log" && key "$name: $(gemm_path "$log")"
  grep -m1 '^attention (' "$log" | sed "s/^/$name: /" | cut -c1-240 >>"$STATE/keys"
  return "$rc"
}

gpu_or_skip() {  # the common preconditions of the GPU stages: a GPU, a current build
  [ "${GPU:-0}" = 1 ] || { result "skipped: no GPU"; return 1; }
  [ "${BUILT_train_gpt:-0}" = 1 ] && [ "${BUILT_libtrain_gpt_cuda_so:-0}" = 1 ] ||
    { result "skipped: train_gpt or libtrain_gpt_cuda.so not built"; return 1; }
}

stage_bench() {
  gpu_or_skip || return
  local fails=0 m
  for m in bf16 fp8 fp16; do
    bench_one "gpt2_$m" 100 --model=gpt2 --modes=$m --batch=8 --seq=1024 --repeats=2 --iters=10 ||
      fails=$((fails + 1))
  done
  $REPORT ratio "$LOGS"/bench_gpt2_{bf16,fp8,fp16}.log --num fp8 --den bf16 >>"$STATE/keys"
  # GPT-2 350M, bf16 and fp8 (issue 5's targets: fp8 >= 1.25x tokens/s, peak memory <= bf16),
  # here rather than in extras so that the timings are taken together, before anything else.
  for m in bf16 fp8; do
    bench_one "gpt2-medium_$m" 120 --model=gpt2-medium --modes=$m --batch=8 --seq=1024 \
      --repeats=2 --iters=10 || fails=$((fails + 1))
  done
  $REPORT ratio "$LOGS"/bench_gpt2-medium_{bf16,fp8}.log --num fp8 --den bf16 >>"$STATE/keys"
  # The attention paths side by side at 124M bf16: cuDNN's fused attention (issue 44) beside
  # the cuBLAS path, one process each, the same B x T. (The hand-written flash kernels have
  # gone: cuda.attention=flash would be read as cudnn.)
  local opt
  for opt in cublas cudnn; do
    bench_one "gpt2_bf16_attention-$opt" 75 --model=gpt2 --modes=bf16 --batch=8 --seq=1024 \
      --repeats=1 --iters=8 --cuda.attention=$opt || fails=$((fails + 1))
  done
  if [ $fails -eq 0 ]; then result "ok (GPT-2 124M bf16 fp8 fp16, 350M bf16 fp8, 124M bf16 attention cublas cudnn, B 8 x T 1024; tables in bench.md)"
  else result "FAILED ($fails of 7 benches; bench.md, logs/bench_gpt2*.log)"; fi
}

# ---------------------------------------------------------------- the per-op profile

# Every op of a GPT-2 124M step, bf16 then fp8, timed with CUDA events against its floor from
# FLOPs and bytes and the ceilings measured in the same process (src/cli/profile.cpp); the
# three slowest ops of each mode to the stage's key numbers.
stage_profile() {
  gpu_or_skip || return
  local log=$LOGS/profile.log dir=$WORK/profile rc
  run_limited "$(limit 120)" "$log" "$BUILD/train_gpt" bench --device=cuda --profile \
    --model=gpt2 --modes=bf16,fp8 --batch=8 --seq=1024 --iters=5 --out "$dir"
  rc=$?
  [ -f "$dir/profile.md" ] && cp "$dir/profile.md" "$OUTDIR/profile.md"
  if [ "$rc" -ne 0 ]; then
    result "FAILED (status $rc$([ "$rc" -eq 124 ] && echo ', timed out'); logs/profile.log)"
    return
  fi
  grep -E '^(### |step )' "$log" | cut -c1-200 | while read -r line; do key "$line"; done
  awk '/^\| op \|/ {n = 0; next} /^\|---/ {next} /^\| / && n < 3 {print; n++}' "$log" |
    cut -c1-200 | while read -r line; do key "$line"; done
  result "ok (profile.md; every op of every layer in logs: profile.csv)"
  cp "$dir/profile.csv" "$LOGS/profile.csv" 2>/dev/null
}

# ---------------------------------------------------------------- 4. the PyTorch baseline

stage_torch() {
  local log=$LOGS/torch_bench.log json=$WORK/torch_bench.json rc
  if [ -z "${TORCH_PY:-}" ]; then
    result "skipped: no torch in python3 or /usr/bin/python3$([ "${GPU:-0}" = 1 ] || echo '; the CPU smoke test could not run')"
    return
  fi
  if [ "${GPU:-0}" != 1 ]; then
    # No GPU: the CPU smoke test, so the script is known to run before the GPU call.
    run_limited "$(limit 120)" "$log" "$TORCH_PY" scripts/gpu/torch_gpt2_bench.py --device cpu --tiny --json "$json"
    rc=$?
    $REPORT torch "$json" >>"$STATE/keys"
    if [ $rc -eq 0 ]; then result "skipped: no GPU; the CPU smoke test (--device cpu --tiny) passed"
    else result "skipped: no GPU; the CPU smoke test FAILED (status $rc, logs/torch_bench.log)"; fi
    return
  fi
  run_limited "$(limit 240)" "$log" "$TORCH_PY" scripts/gpu/torch_gpt2_bench.py --device cuda --model gpt2 \
    --batch 8 --seq 1024 --warmup 3 --steps 10 --json "$json"
  rc=$?
  [ -f "$json" ] && cp "$json" "$OUTDIR/torch_bench.json"
  $REPORT torch "$json" >>"$STATE/keys"
  $REPORT headline "$LOGS/bench_gpt2_bf16.log" "$json" | sed 's/^/HEADLINE: /' >>"$STATE/keys"
  if [ $rc -eq 0 ]; then result "ok (GPT-2 124M in PyTorch, B 8 x T 1024; torch_bench.json)"
  else result "FAILED (status $rc$([ $rc -eq 124 ] && echo ', timed out'); logs/torch_bench.log)"; fi
}

# ---------------------------------------------------------------- 5. the CUDA tests

# The test files' cases, one name per line (doctest's listing).
list_cases() {  # the names stand between the two rules after "listing all test case names"
  "$BUILD/run_tests" -sf="*tests/cuda/$1" --list-test-cases 2>/dev/null |
    awk '/listing all test case names/ { on = 1; next }
         on && /^=+$/ { if (++rules == 2) exit; next }
         on && rules == 1 { print }'
}

# A crashed file again, case by case, under CUDA_LAUNCH_BLOCKING=1: which case crashes.
rerun_cases() {
  local f=$1 log=$LOGS/tests/${1%.cu}_cases.log name rc
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    if [ "$(limit 60)" -lt 10 ]; then key "$f: case reruns cut (out of time)"; return; fi
    # doctest splits filters at commas: a '?' (any character) stands for each.
    TG_BIN=$ROOT/$BUILD/train_gpt CUDA_LAUNCH_BLOCKING=1 run_limited "$(limit 60)" "$log" "$BUILD/run_tests" \
      -sf="*tests/cuda/$f" -tc="${name//,/?}"
    rc=$?
    [ $rc -eq 0 ] || key "$f: case \"$name\": status $rc$([ $rc -ge 128 ] && echo ' (crashed)')"
  done < <(list_cases "$f")
}

stage_tests() {
  [ "${BUILT_run_tests:-0}" = 1 ] || { result "skipped: run_tests not built"; return; }
  mkdir -p "$LOGS/tests"
  local f log rc t line bad=0 crashed=0 ran=0
  local files=(test_kernels.cu test_attention_cudnn.cu test_fp8_backend.cu test_training.cu
    test_scaled_backend.cu test_scratch_plan.cu test_auto_backend.cu test_nccl.cu)
  for f in tests/cuda/test_*.cu; do  # any file not in the list above runs last
    [[ " ${files[*]} " == *" ${f##*/} "* ]] || files+=("${f##*/}")
  done
  {
    echo "## CUDA tests ($(date -u +%FT%TZ), ${GPU_NAME:-no GPU})"
    echo
    echo "| file | result | seconds |"
    echo "|---|---|---:|"
  } >>"$OUTDIR/tests.md"
  for f in "${files[@]}"; do
    log=$LOGS/tests/${f%.cu}.log
    if [ "$(limit 100)" -lt 15 ]; then
      echo "| $f | skipped: out of time | - |" >>"$OUTDIR/tests.md"
      key "$f: skipped (out of time)"
      continue
    fi
    t=$(now)
    # -d: each case's duration, so a hang shows which case was running.
    TG_BIN=$ROOT/$BUILD/train_gpt OMP_NUM_THREADS=$JOBS run_limited "$(limit 100)" "$log" \
      "$BUILD/run_tests" -sf="*tests/cuda/$f" -d
    rc=$?
    ran=$((ran + 1))
    line=$($REPORT doctest "$log")
    [ $rc -eq 124 ] && line="TIMED OUT; $line"
    # A crash: killed by a signal, or failed with a CUDA error (a sticky one fails every
    # later case of the process too, so each case runs again on its own).
    if [ $rc -ge 128 ] && [ $rc -ne 124 ] ||
      { [ $rc -ne 0 ] && grep -qE 'CUDA error|cudaError|illegal memory access|unspecified launch failure' "$log"; }; then
      line="CRASHED (status $rc); $line"
      crashed=$((crashed + 1))
      rerun_cases "$f"
    fi
    [ $rc -eq 0 ] || bad=$((bad + 1))
    grep -q 'CUDA tests skipped: no GPU' "$log" && line+=" (no GPU: the CUDA cases skipped themselves)"
    echo "| $f | $line (status $rc) | $(($(now) - t)) |" >>"$OUTDIR/tests.md"
    key "$f: $line"
  done
  echo >>"$OUTDIR/tests.md"
  if [ $bad -eq 0 ]; then result "ok ($ran files$([ "${GPU:-0}" = 1 ] || echo ', no GPU: cases skipped themselves'); tests.md)"
  else result "FAILED ($bad of $ran files, $crashed crashed; tests.md, logs/tests/)"; fi
}

# ---------------------------------------------------------------- 6. compute-sanitizer

# Small, fast kernel cases: every kernel family with shared memory, shuffles or atomics.
SAN_CASES='cuda: encoder forward and backward,cuda: layernorm forward*,cuda: gelu and residual*,cuda: fused classifier*,cuda: attention forward and backward,cuda: sum of squares*,fp8 amax*'

stage_sanitizer() {
  [ "${GPU:-0}" = 1 ] || { result "skipped: no GPU"; return; }
  [ "${SANITIZER:-0}" = 1 ] || { result "skipped: compute-sanitizer not found"; return; }
  [ "${BUILT_run_tests:-0}" = 1 ] || { result "skipped: run_tests not built"; return; }
  local tool log rc errs bad=0
  {
    echo "## compute-sanitizer on: $SAN_CASES"
    echo
    echo "| tool | result | seconds |"
    echo "|---|---|---:|"
  } >>"$OUTDIR/tests.md"
  # racecheck last: it is the slow one (the shared-memory kernels; the flash kernels, since
  # gone, took more than 67 s on the H200 for their one case), and takes what the others leave.
  local tools=(memcheck synccheck initcheck racecheck) i lim
  for i in "${!tools[@]}"; do
    tool=${tools[$i]}
    log=$LOGS/sanitizer_$tool.log
    # Each tool its share of what the stage has left (at least 30 s, at most 60; racecheck
    # all of it up to 100 s), so that one slow tool does not leave the others nothing.
    lim=$(((STAGE_END - $(now)) / (${#tools[@]} - i)))
    [ "$tool" = racecheck ] && lim=$((lim > 100 ? 100 : lim)) || lim=$((lim > 60 ? 60 : lim))
    lim=$((lim < 30 ? 30 : lim))
    if [ "$(limit $lim)" -lt 15 ]; then key "$tool: skipped (out of time)"; bad=$((bad + 1)); continue; fi
    local t=$(now)
    OMP_NUM_THREADS=$JOBS run_limited "$(limit $lim)" "$log" compute-sanitizer --tool $tool \
      --error-exitcode 99 --print-limit 1000 "$BUILD/run_tests" -tc="$SAN_CASES"
    rc=$?
    # memcheck, synccheck and initcheck end with an ERROR SUMMARY line, racecheck with a
    # RACECHECK SUMMARY of hazards.
    errs=$(grep -oE '(ERROR SUMMARY: [0-9]+ errors?|RACECHECK SUMMARY: .*)' "$log" | tail -1)
    local line="${errs:-no ERROR SUMMARY line}; $($REPORT doctest "$log"); status $rc"
    [ $rc -eq 124 ] && line="TIMED OUT; $line"
    [ $rc -eq 0 ] || bad=$((bad + 1))
    echo "| $tool | $line | $(($(now) - t)) |" >>"$OUTDIR/tests.md"
    key "$tool: $line"
    grep -m2 -E '^========= (Invalid|Race|Barrier|Uninitialized|Error)' "$log" | cut -c1-200 | sed "s/^/$tool: /" >>"$STATE/keys"
    # Which kernels the printed reports name, counted (the first 1000 reports).
    grep -A1 -E '^========= (Invalid|Race|Barrier|Uninitialized)' "$log" |
      grep -oE '^=========     at [^(]*' | sed 's/^=========     at //' | sort | uniq -c |
      sort -rn | head -8 | sed "s/^ */$tool: reports in /" >>"$STATE/keys"
  done
  echo >>"$OUTDIR/tests.md"
  if [ $bad -eq 0 ]; then result "ok (4 tools clean; tests.md)"
  else result "FAILED ($bad of 4 tools; tests.md, logs/sanitizer_*.log)"; fi
}

# ---------------------------------------------------------------- 7. GPU vs CPU parity

# parity_run NAME DEV ARGS...: one toy run of the parity stage (P, below), its records kept.
parity_run() {
  local name=$1 dev=$2 run=$WORK/runs/parity_$1_$2; shift 2
  run_limited "$(limit 60)" "$LOGS/parity_${name}_$dev.log" "$BUILD/train_gpt" train "${P[@]}" \
    --train.device="$dev" --train.out_dir="$run" "$@"
  # The run's small records travel with the logs; checkpoints stay behind.
  mkdir -p "$LOGS/parity/${name}_$dev"
  cp "$run"/{metrics.jsonl,summary.json,config.json} "$LOGS/parity/${name}_$dev/" 2>/dev/null
}

# cuDNN's fused attention in bf16 against the CPU's lse twin (what cuda.attention=cudnn runs
# on the CPU), with the bf16 row (the cuBLAS path against the CPU's reference) as the measure:
# cudnn passes when its gap over the first ten steps is within twice that row's (at least
# 2e-3). Returns 1 on failure.
parity_attention() {
  local res path
  if [ "$(limit 80)" -lt 30 ]; then key "bf16 cudnn: skipped (out of time)"; return 1; fi
  parity_run bf16_cudnn cpu --precision.mode=bf16 --cuda.attention=cudnn
  parity_run bf16_cudnn cuda --precision.mode=bf16 --cuda.attention=cudnn
  path=$(grep -m1 '^attention:' "$LOGS/parity_bf16_cudnn_cuda.log" | cut -c1-160)
  res=$($REPORT parity "$WORK/runs/parity_bf16_cudnn_cuda" "$WORK/runs/parity_bf16_cudnn_cpu" \
    --ref "$WORK/runs/parity_bf16_cuda" --ref-cpu "$WORK/runs/parity_bf16_cpu")
  echo "| bf16 cudnn | $res | ${path:-no attention line} |" >>"$OUTDIR/parity.md"
  key "bf16 cudnn: $res; ${path:-no attention line (logs/parity_bf16_cudnn_cuda.log)}"
  [[ $res != FAILED* ]]
}

stage_parity() {
  gpu_or_skip || return
  local data=$WORK/data/toy log=$LOGS/parity.log mode dev res bad=0 run
  run_limited "$(limit 60)" "$log" "$BUILD/train_gpt" prepare toy --out "$data" ||
    { result "FAILED (prepare toy; logs/parity.log)"; return; }
  local P=(--model.n_layer=2 --model.n_head=4 --model.n_embd=64 --model.max_seq_len=64
    --data.seq_len=64 --data.batch_size=16 "--data.train=$data/toy_train_*.bin"
    "--data.val=$data/toy_val_*.bin" --eval.every=0 --eval.batches=4 --sample.tokens=0
    --train.steps=50 --optim.lr=6e-4 --optim.warmup_steps=5 --train.log_every=10
    --checkpoint.every=0)
  # The modes' rows compare the cuBLAS attention with the CPU's reference (auto would take
  # cuDNN in bf16 on the GPU and the reference on the CPU); parity_attention the lse paths.
  {
    echo "## GPU vs CPU parity: toy model (L2 C64, B 16 x T 64), 50 steps"
    echo
    echo "| mode | result | GEMM path (cuda run) |"
    echo "|---|---|---|"
  } >>"$OUTDIR/parity.md"
  for mode in fp32 bf16 fp8 fp8-block mxfp8; do
    if [ "$(limit 60)" -lt 20 ]; then key "$mode: skipped (out of time)"; bad=$((bad + 1)); continue; fi
    for dev in cuda cpu; do
      parity_run "$mode" "$dev" --precision.mode="$mode" --cuda.attention=cublas
    done
    res=$($REPORT parity "$WORK/runs/parity_${mode}_cuda" "$WORK/runs/parity_${mode}_cpu")
    [[ $res == FAILED* ]] && bad=$((bad + 1))
    local path=-
    [[ $mode == fp8* || $mode == mx* ]] && path=$(gemm_path "$LOGS/parity_${mode}_cuda.log")
    echo "| $mode | $res | $path |" >>"$OUTDIR/parity.md"
    key "$mode: $res$([ "$path" = - ] || echo "; $path")"
  done
  parity_attention || bad=$((bad + 1))
  echo >>"$OUTDIR/parity.md"
  if [ $bad -eq 0 ]; then result "ok (5 modes ran on both devices, and bf16 cudnn within twice the bf16 row's gap; parity.md)"
  else result "FAILED ($bad of 6 rows; parity.md, logs/parity_*.log)"; fi
}

# ---------------------------------------------------------------- 8. while time remains

stage_extras() {
  gpu_or_skip || return
  local ran=0 fails=0 name m
  local B=(--batch=8 --seq=1024)
  # Block-scaled recipes at 124M with cuBLASLt's error log: the start-up and self-check
  # lines say which GEMM path runs (native on sm_90: fp8-rowwise, fp8-block; mxfp8 portable).
  for m in fp8-block fp8-rowwise mxfp8; do
    ran=$((ran + 1))
    CUBLASLT_LOG_LEVEL=1 CUBLASLT_LOG_FILE=$LOGS/cublaslt_$m.log \
      bench_one "gpt2_$m" 90 --model=gpt2 --modes=$m "${B[@]}" --repeats=1 --iters=3 ||
      fails=$((fails + 1))
    [ -s "$LOGS/cublaslt_$m.log" ] &&
      key "$m: cuBLASLt log $(wc -l <"$LOGS/cublaslt_$m.log") lines, first: $(head -1 "$LOGS/cublaslt_$m.log" | cut -c1-160)"
  done
  if [ $fails -eq 0 ]; then result "ok ($ran benches; bench.md)"
  else result "FAILED or cut: $fails of $ran benches (bench.md, logs/bench_*.log)"; fi
}

# ---------------------------------------------------------------- main

{
  echo "# gpu_check $(date -u +%FT%TZ) on $(hostname)"
  echo
  # The tree sent to a lent machine may come without .git: then no commit is named.
  rev=$(git rev-parse --short HEAD 2>/dev/null) &&
    rev="commit $rev$(git diff --quiet HEAD 2>/dev/null || echo ' with local changes')" || rev="no git"
  echo "deadline ${DEADLINE} s; $rev; stages: env,build,$STAGES; logs in logs.tgz"
  echo
} >"$SUMMARY"
: >"$STATE/env.sh"
fact BUILD "$BUILD"

# Caps: what each stage may take at most, so that a slow one leaves time to the next; the
# deadline cuts every one of them further.
#     id        title                              need  cap  function
stage env       "(machine, tools)"                    5   60  stage_env
stage build     "(sm_90, make -k)"                   30  420  stage_build
stage probe     "(cuBLASLt heuristic and FP8 launches)" 20 90 stage_probe
stage fp8       "(the per-tensor FP8 refusal)"       20  200  stage_fp8
stage profile   "(per-op profile, GPT-2 124M)"       30  130  stage_profile
stage bench     "(train_gpt, GPT-2 124M and 350M)"   30  400  stage_bench
stage torch     "(PyTorch baseline, GPT-2 124M)"     30  180  stage_torch
stage llmc      "(llm.c beside us, GPT-2 124M)"      30  300  stage_llmc
stage ncu       "(the five slowest kernels)"         40  200  stage_ncu
stage tests     "(tests/cuda, one process per file)" 20  180  stage_tests
stage parity    "(GPU vs CPU, toy model)"            20  210  stage_parity
stage extras    "(attention, block-scaled)"          25  200  stage_extras
stage sanitizer "(compute-sanitizer)"                20  200  stage_sanitizer

if [ -f "$LOGS/bench_gpt2_bf16.log" ] && [ -f "$WORK/torch_bench.json" ]; then
  echo "- **headline**: $($REPORT headline "$LOGS/bench_gpt2_bf16.log" "$WORK/torch_bench.json")" >>"$SUMMARY"
fi
# The table beside PyTorch and llm.c, as the llmc stage made it (bench.md has it too).
[ -s "$WORK/compare.md" ] && { echo; cat "$WORK/compare.md"; echo; } >>"$SUMMARY"
echo "- **total**: $(($(now) - T0)) s of the ${DEADLINE} s deadline" >>"$SUMMARY"
pack_logs
echo "== gpu_check done: $OUTDIR ($(ls "$OUTDIR" | wc -l) files)"
cat "$SUMMARY"
