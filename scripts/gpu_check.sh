#!/usr/bin/env bash
# The one command for a machine with a GPU and no package registry:
#   bash scripts/gpu_check.sh        (needs .deps/include from scripts/gpu_deps.sh)
# 1. nvidia-smi, nvcc, NCCL lookup; 2. build with nvcc (NO_BLAS=1 NO_MPI=1, headers from
# .deps/include); 3. every CUDA test (tests/cuda/: "cuda: *" and the FP8 kernel cases
# "fp8 *"); 4. GPU-vs-CPU parity: the toy model trained on cuda and on cpu in fp32, bf16 and
# fp8, losses compared step by step; 5. `train_gpt bench` of GPT-2 124M (T=1024) in fp32,
# bf16, fp16 and fp8, and of GPT-2 350M in bf16 and fp8, with fp8/bf16 ratios of tokens/s
# and peak memory (targets: >= 1.25x and <= 1.00x at 350M); 6. the CPU test suite (if time
# is left); a short table last. Logs go to $OUT when set (else runs/gpu_check). Budget: well
# under 10 minutes on an H100/H200 with 16 cores; every stage has its own timeout.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-runs/gpu_check}
mkdir -p "$LOG"
export PATH="/usr/local/cuda/bin:$PATH"
JOBS=${JOBS:-$(nproc)}
T0=$(date +%s)
declare -a ROWS=()
row() { ROWS+=("| $1 | $2 | $3 |"); }
elapsed() { echo "$(($(date +%s) - $1))s"; }

echo "== gpu_check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L || { echo "no GPU visible (nvidia-smi failed)"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
nvcc --version | tail -2
# NCCL (src/cuda/nccl_comm.cu): the toolkit's own, else the Python wheel nvidia-nccl-cu13,
# through .deps/nccl (its header to build; its lib folder, the CUDA library's rpath, where
# nccl_comm.cu opens libnccl.so.2 at run time).
NCCL_VARS=()
if [ -f /usr/local/cuda/include/nccl.h ]; then
  echo "NCCL: /usr/local/cuda"
else
  d=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)
  so=$( [ -n "$d" ] && find "$d" -name 'libnccl.so.2*' 2>/dev/null | head -1)
  if [ -n "$so" ] && [ -f "$d/include/nccl.h" ]; then
    mkdir -p .deps/nccl/lib
    ln -sf "$d/include" .deps/nccl/include
    ln -sf "$so" .deps/nccl/lib/libnccl.so
    ln -sf "$so" .deps/nccl/lib/libnccl.so.2
    NCCL_VARS=("NCCL_HOME=$PWD/.deps/nccl")
    echo "NCCL: wheel at $d"
  else
    NCCL_VARS=(NO_NCCL=1)
    echo "NCCL: not found (built without it; the NCCL tests are left out)"
  fi
fi

if [ ! -f .deps/include/cxxopts.hpp ]; then
  echo "missing .deps/include: run scripts/gpu_deps.sh where the packages are, carry .deps"
fi
VARS=(NO_BLAS=1 NO_MPI=1 SKIP_SETUP=1 "EXTRA_CFLAGS=-I.deps/include" "${NCCL_VARS[@]}")
BUILD=build/rel-nompi-noblas
BIN=$BUILD/train_gpt
TESTS=$BUILD/run_tests

# ---- build
t=$(date +%s)
if timeout 300 make "${VARS[@]}" -j"$JOBS" "$BIN" "$TESTS" >"$LOG/build.log" 2>&1; then
  row build ok "$(elapsed "$t")"
else
  row build FAILED "$(elapsed "$t")"
  tail -40 "$LOG/build.log"
  printf '%s\n' "| stage | result | time |" "|---|---|---|" "${ROWS[@]}"
  exit 1
fi
cuobjdump --list-elf "$BUILD/libtrain_gpt_cuda.so" 2>/dev/null | sed 's/^/  /' | head -20

# ---- CUDA tests
t=$(date +%s)
TG_BIN=$PWD/$BIN OMP_NUM_THREADS=$JOBS timeout 300 "$TESTS" -tc='cuda: *,fp8 *' >"$LOG/cuda_tests.log" 2>&1
rc=$?
tail -30 "$LOG/cuda_tests.log"
row "CUDA tests" "$(grep -E '^[0-9]+ passed' "$LOG/cuda_tests.log" | tail -1) (rc $rc)" "$(elapsed "$t")"

# ---- GPU vs CPU parity on the toy task
t=$(date +%s)
DATA=$LOG/toy_data
P=(--model.n_layer=2 --model.n_head=4 --model.n_embd=64 --model.max_seq_len=64 --data.seq_len=64
   --data.batch_size=16 "--data.train=$DATA/toy_train_*.bin" "--data.val=$DATA/toy_val_*.bin"
   --eval.every=0 --eval.batches=4 --sample.tokens=0 --train.steps=50 --optim.warmup_steps=5
   --train.log_every=10)
$BIN prepare toy --out "$DATA" >"$LOG/parity.log" 2>&1
for mode in fp32 bf16 fp8; do
  for dev in cuda cpu; do
    timeout 120 $BIN train "${P[@]}" --precision.mode=$mode --train.device=$dev \
      --train.out_dir="$LOG/parity_${mode}_$dev" >>"$LOG/parity.log" 2>&1
  done
  res=$(python3 - "$LOG/parity_${mode}_cuda/metrics.jsonl" "$LOG/parity_${mode}_cpu/metrics.jsonl" <<'PY'
import json, sys
def losses(p):
    try:
        return [json.loads(l)["loss"] for l in open(p) if '"kind":"train"' in l]
    except OSError:
        return []
g, c = losses(sys.argv[1]), losses(sys.argv[2])
if not g or len(g) != len(c):
    print(f"FAILED ({len(g)} gpu / {len(c)} cpu steps)")
else:
    gap = max(abs(a / b - 1) for a, b in zip(g, c))
    print(f"max rel loss gap {gap:.2e} over {len(g)} steps, final {g[-1]:.4f} vs {c[-1]:.4f}")
PY
)
  echo "parity $mode: $res"
  row "parity $mode (toy, cuda vs cpu)" "$res" "$(elapsed "$t")"
done

# ---- benchmark: GPT-2 124M and 350M, B=8, T=1024; fp8 against bf16
t=$(date +%s)
timeout 200 $BIN bench --device=cuda --model=gpt2 --modes=bf16,fp8,fp16,fp32 --iters=10 --batch=8 \
  --seq=1024 >"$LOG/bench.log" 2>&1
rc=$?
cat "$LOG/bench.log"
row "bench GPT-2 124M" "rc $rc (table in bench.log)" "$(elapsed "$t")"
if [ $(($(date +%s) - T0)) -lt 330 ]; then
t=$(date +%s)
timeout 150 $BIN bench --device=cuda --model=gpt2-medium --modes=bf16,fp8 --iters=10 --batch=8 \
  --seq=1024 >"$LOG/bench350.log" 2>&1
rc=$?
cat "$LOG/bench350.log"
row "bench GPT-2 350M" "rc $rc (table in bench350.log)" "$(elapsed "$t")"
else
  row "bench GPT-2 350M" "skipped (time)" "-"
fi
# fp8 vs bf16 from the tables: | model | params | B x T | mode | ms/step | tokens/s | ... | peak memory | ...
for f in bench.log bench350.log; do
  res=$(python3 - "$LOG/$f" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) >= 11 and c[3] in ("bf16", "fp8"):
        rows[c[3]] = (c[0], float(c[5]), float(c[9].split()[0]))
if "bf16" in rows and "fp8" in rows:
    b, f = rows["bf16"], rows["fp8"]
    print(f"{b[0]}: fp8/bf16 tokens/s {f[1] / b[1]:.2f}x, peak memory {f[2] / b[2]:.3f}x")
else:
    print("no bf16 and fp8 rows")
PY
)
  echo "$res"
  row "fp8 vs bf16 ($f)" "$res" "-"
done

# The opt-in paths, bf16 only (when time is left): flash attention (lse instead of the T x T
# probabilities: compare tokens/s and peak memory with the bf16 row above), the fused
# attention forward, then that plus the GELU epilogue.
for opt in "--cuda.attention=flash" "--cuda.attention=fused" "--cuda.attention=fused --cuda.gelu_epilogue=true"; do
  [ $(($(date +%s) - T0)) -lt 420 ] || { row "bench bf16, $opt" "skipped (time)" "-"; continue; }
  t=$(date +%s)
  name=$(echo "$opt" | sed 's/--//g' | tr ' =' '_-')
  timeout 90 $BIN bench --device=cuda --model=gpt2 --modes=bf16 --iters=5 $opt \
    --batch=8 --seq=1024 >"$LOG/bench_$name.log" 2>&1
  rc=$?
  grep -E '^\| GPT' "$LOG/bench_$name.log" | sed "s/^/$opt: /"
  row "bench bf16, $opt" "rc $rc (bench_$name.log)" "$(elapsed "$t")"
done

# ---- the CPU suite too, when time is left (the whole run must stay under 10 minutes);
# without MPI in this build, the MPI tests are left out
if [ $(($(date +%s) - T0)) -lt 360 ]; then
  t=$(date +%s)
  TG_BIN=$PWD/$BIN OMP_NUM_THREADS=$JOBS timeout 150 "$TESTS" -tce='cuda: *,fp8 *,mpi: *,comm: *' \
    >"$LOG/cpu_tests.log" 2>&1
  rc=$?
  row "CPU tests" "$(grep -E '^[0-9]+ passed' "$LOG/cpu_tests.log" | tail -1) (rc $rc)" "$(elapsed "$t")"
fi

echo
echo "== gpu_check summary ($(elapsed "$T0") in all; logs in $LOG)"
cat "$LOG/bench.log" "$LOG/bench350.log" 2>/dev/null | grep -E '^\|'
echo
printf '%s\n' "| stage | result | time |" "|---|---|---|" "${ROWS[@]}"
