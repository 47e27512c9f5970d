# shellcheck shell=bash
# gpu_check_llmc.sh: scripts/gpu/gpu_check.sh's llmc and ncu stages (sourced by it; uses its
# helpers and variables), and llmc_build, which scripts/gpu/gpu_prebuild.sh uses too.
#
# llmc: llm.c (Karpathy's train_gpt2.cu, MIT) beside train_gpt on the same GPU, model (GPT-2
#   124M, llm.c's `-e d12`: random init, vocabulary 50257 padded to 50304), B 8 x T 1024, bf16,
#   on GPT-2 token shards of the same text (.anchors/llm.c, made here before the call by
#   scripts/gpu/llmc_prepare.sh: llm.c's sources as they are, the shards, gpt2_tokenizer.bin,
#   cudnn-frontend's headers). Two builds: plain (`make train_gpt2cu NO_MULTI_GPU=1`, llm.c's
#   own attention kernels) and cuDNN (`USE_CUDNN=1`: cuDNN's flash attention), each for sm_90
#   (GPU_COMPUTE_CAPABILITY=90: the Makefile's own nvidia-smi query never fires, its
#   file_exists_in_path macro expands to nothing, and without it nvcc embeds sm_75 code) with
#   scripts/gpu/llmc_cuda13.h force-included (CUDA 13 dropped a cudaMemAdvise overload llm.c
#   calls). Each binary is .prebuilt's (gpu_prebuild.sh built it here) where it loads, else
#   built on the device. Each runs LLMC_STEPS steps with `-r 0` (no GELU recomputation: the
#   same work as train_gpt's step) and no sampling, one validation batch at the ends; its step
#   lines give the median ms/step over the steps after the first three (train_gpt bench's
#   warm-up), tokens/s = B x T over it, and llm.c's own MFU where its table knows the GPU (its
#   mfu.h has the H100s, not the H200). bench.md and summary.md get a table of train_gpt bf16,
#   PyTorch and llm.c; an MFU "at train_gpt's count" is train_gpt's MFU scaled by the
#   tokens/s ratio (same model, same FLOPs per token).
# ncu: the five slowest kernels of a train_gpt bf16 GPT-2 124M step (B 8 x T 1024), each with
#   its achieved DRAM bandwidth and SM throughput, in two ncu runs of one short
#   `train_gpt bench` (3 warm-up and 3 timed steps): first the duration alone (one pass) of
#   the run's first NCU_WINDOW launches (set-up, then about four steps of some 520 kernels:
#   a cap, so that ncu's per-launch cost cannot eat the stage), ranked by their summed time;
#   then those five kernels' counters, one launch per launch configuration
#   (`--filter-mode per-launch-config`; else their last 60 launches in the window):
#   dram__bytes_read/write.sum over gpu__time_duration.sum, dram__throughput and
#   sm__throughput as % of peak. `--clock-control none` (the card's clocks as found;
#   METHOD.md). The table goes to profile.md and the stage's key lines.

LLMC_SRC=${LLMC_SRC:-$ROOT/.anchors/llm.c}
LLMC_STEPS=${LLMC_STEPS:-40}
NCU_WINDOW=${NCU_WINDOW:-2500}

# The cudnn-frontend headers: .anchors/llm.c's (llmc_prepare.sh), else .deps/include's.
llmc_frontend() {
  if [ -f "$LLMC_SRC/cudnn-frontend/include/cudnn_frontend.h" ]; then echo "$LLMC_SRC/cudnn-frontend/include"
  elif [ -f "$ROOT/.deps/include/cudnn_frontend.h" ]; then echo "$ROOT/.deps/include"
  else return 1; fi
}

# cuDNN's header and library: the toolkit's, else a pip wheel's (torch brings nvidia-cudnn-cu13;
# found under the `nvidia` namespace package). Sets LLMC_CUDNN_INC and LLMC_CUDNN_LIB (a
# folder where libcudnn.so, which -lcudnn wants, exists; the wheel has only libcudnn.so.9, so
# LINKDIR gets a link) and LLMC_CUDNN_RUN (the folder of libcudnn.so.9 for LD_LIBRARY_PATH).
llmc_find_cudnn() {
  local linkdir=$1 d so inc p ns=()
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
    if [ -f "$d/libcudnn.so" ] && [ -f "$CUDA_HOME/include/cudnn.h" ]; then
      LLMC_CUDNN_INC=$CUDA_HOME/include LLMC_CUDNN_LIB=$d LLMC_CUDNN_RUN=$d
      return 0
    fi
  done
  for p in ${TORCH_PY:-} python3; do
    mapfile -t ns < <("$p" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
    [ ${#ns[@]} -gt 0 ] && break
  done
  [ ${#ns[@]} -gt 0 ] || return 1
  so=$(find "${ns[@]}" -maxdepth 4 -name 'libcudnn.so.9' 2>/dev/null | head -1)
  inc=$(find "${ns[@]}" -maxdepth 4 -name 'cudnn.h' 2>/dev/null | head -1)
  [ -n "$so" ] && [ -n "$inc" ] || return 1
  mkdir -p "$linkdir"
  ln -sf "$so" "$linkdir/libcudnn.so"
  LLMC_CUDNN_INC=${inc%/cudnn.h} LLMC_CUDNN_LIB=$linkdir LLMC_CUDNN_RUN=${so%/*}
}

# llmc_build VARIANT DIR LOG: builds llm.c's train_gpt2cu (VARIANT plain or cudnn) for sm_90
# in DIR, a fresh copy of $LLMC_SRC (the carried folder stays clean); make's status. NVML:
# llm.c's mfu.h uses it only where nvml.h is found, then -lnvidia-ml links against the
# toolkit's stub (the driver's libnvidia-ml.so.1 loads at run time).
llmc_build() {
  local variant=$1 dir=$2 log=$3 fe ld="-lcublas -lcublasLt" libpath="" cpath=""
  rm -rf "$dir"
  mkdir -p "$dir"
  cp -r "$LLMC_SRC"/train_gpt2.cu "$LLMC_SRC"/Makefile "$LLMC_SRC"/llmc "$dir"/
  chmod -R u+w "$dir"
  local vars=(train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY=90
    "PFLAGS=-DENABLE_BF16 -include $ROOT/scripts/gpu/llmc_cuda13.h")
  if [ -f "$CUDA_HOME/include/nvml.h" ] || [ -f "$CUDA_HOME/targets/x86_64-linux/include/nvml.h" ]; then
    ld+=" -lnvidia-ml"
    libpath="$CUDA_HOME/lib64/stubs:$CUDA_HOME/targets/x86_64-linux/lib/stubs"
  fi
  if [ "$variant" = cudnn ]; then
    fe=$(llmc_frontend) || { echo "no cudnn-frontend headers (scripts/gpu/llmc_prepare.sh)" >>"$log"; return 3; }
    llmc_find_cudnn "$dir/cudnn-lib" || { echo "no cudnn.h + libcudnn (toolkit or pip wheel)" >>"$log"; return 4; }
    mkdir -p "$dir/cudnn-frontend"
    ln -sfn "$fe" "$dir/cudnn-frontend/include"  # where llm.c's Makefile looks
    vars+=(USE_CUDNN=1)
    ld+=" -lcudnn -lnvrtc"  # cudnn-frontend 1.32 compiles some engines at run time (NVRTC)
    cpath=$LLMC_CUDNN_INC
    libpath+="${libpath:+:}$LLMC_CUDNN_LIB"
    echo "cuDNN: headers $LLMC_CUDNN_INC, library $LLMC_CUDNN_LIB; cudnn-frontend $fe" >>"$log"
  fi
  vars+=("NVCC_LDFLAGS=$ld")
  echo "+ (cd $dir && CPATH=$cpath LIBRARY_PATH=$libpath make ${vars[*]})" >>"$log"
  ( cd "$dir" && CPATH="$cpath${CPATH:+:$CPATH}" LIBRARY_PATH="$libpath${LIBRARY_PATH:+:$LIBRARY_PATH}" \
    timeout -k 5 "${LLMC_BUILD_LIMIT:-600}" make "${vars[@]}" ) >>"$log" 2>&1
}

# llmc_binary VARIANT: the path of a train_gpt2cu that loads here: .prebuilt's, else one built
# now; empty (and a key line) when neither. (Called in $(...): its keys go to the file.)
llmc_binary() {
  local variant=$1 bin=$WORK/llmc/train_gpt2cu_$1 gz=$ROOT/.prebuilt/llmc_train_gpt2cu_$1.gz
  local log=$LOGS/llmc_build_$1.log missing
  if [ -f "$gz" ]; then
    gunzip -c "$gz" >"$bin" && chmod +x "$bin"
    missing=$(ldd "$bin" 2>&1 | grep 'not found' | xargs echo)
    if [ -z "$missing" ]; then key "llm.c $variant: .prebuilt's binary ($(head -1 "$ROOT/.prebuilt/SOURCE" 2>/dev/null | cut -c1-80))"; echo "$bin"; return; fi
    key "llm.c $variant: .prebuilt's binary misses $missing here; building"
  fi
  if [ "$(limit 240)" -lt 40 ]; then key "llm.c $variant: no time left to build"; return; fi
  local t
  t=$(now)
  LLMC_BUILD_LIMIT=$(limit 240) llmc_build "$variant" "$WORK/llmc/src_$variant" "$log"
  local rc=$?
  if [ $rc -eq 0 ] && [ -x "$WORK/llmc/src_$variant/train_gpt2cu" ]; then
    cp "$WORK/llmc/src_$variant/train_gpt2cu" "$bin"
    key "llm.c $variant: built here in $(($(now) - t)) s (logs/llmc_build_$variant.log)"
    echo "$bin"
  else
    key "llm.c $variant: build FAILED (status $rc; logs/llmc_build_$variant.log): $(grep -m1 -E 'error|Error|cuDNN|no cudnn' "$log" | cut -c1-160)"
  fi
}

stage_llmc() {
  local data=$LLMC_SRC/data v bin log rc ok=0 ran=0 logs=()
  if [ ! -f "$LLMC_SRC/train_gpt2.cu" ] || [ ! -f "$LLMC_SRC/gpt2_tokenizer.bin" ] ||
    ! compgen -G "$data/*_train_*.bin" >/dev/null; then
    result "skipped: no .anchors/llm.c with its shards (run scripts/gpu/llmc_prepare.sh here, carry .anchors)"
    return
  fi
  key "llm.c sources: $(wc -l <"$LLMC_SRC/SOURCES.sha256" 2>/dev/null || echo '?') files; data: $(cd "$data" && printf '%s ' ./*_train_*.bin ./*_val_*.bin); cudnn-frontend: $(llmc_frontend || echo none)"
  [ "${GPU:-0}" = 1 ] || { result "skipped: no GPU (the carried folder is in place)"; return; }
  mkdir -p "$WORK/llmc"
  # The CUDA libraries (cuBLAS, NVRTC) and cuDNN (the toolkit's or the wheel's) for the
  # binaries, .prebuilt's included.
  export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if llmc_find_cudnn "$WORK/llmc/cudnn-lib"; then
    export LD_LIBRARY_PATH="$LLMC_CUDNN_RUN:$LD_LIBRARY_PATH"
    key "cuDNN for llm.c: headers $LLMC_CUDNN_INC, library $LLMC_CUDNN_RUN"
  fi
  for v in plain cudnn; do
    if [ "$v" = cudnn ] && ! llmc_frontend >/dev/null; then key "llm.c cudnn: skipped (no cudnn-frontend headers carried)"; continue; fi
    bin=$(llmc_binary $v)
    [ -n "$bin" ] || continue
    log=$LOGS/llmc_$v.log
    if [ "$(limit 90)" -lt 20 ]; then key "llm.c $v: skipped (out of time)"; continue; fi
    ran=$((ran + 1))
    # From llm.c's folder: it opens gpt2_tokenizer.bin there. -o unset: no log or checkpoints.
    ( cd "$LLMC_SRC" && run_limited "$(limit 90)" "$log" "$bin" -i "$data/*_train_*.bin" \
      -j "$data/*_val_*.bin" -e d12 -b 8 -t 1024 -x "$LLMC_STEPS" -r 0 -s 0 -v 100000 -m 1 -h 0 )
    rc=$?
    logs+=("$v=$log")
    if [ $rc -eq 0 ]; then ok=$((ok + 1)); $REPORT llmc "$log" --tag " ($v)" >>"$STATE/keys"
    else key "llm.c $v: FAILED (status $rc$([ $rc -eq 124 ] && echo ', timed out')): $(grep -v '^+' "$log" | tail -1 | cut -c1-200)"; fi
  done
  llmc_compare "${logs[@]}"
  if [ $ran -eq 0 ]; then result "FAILED (no llm.c binary; logs/llmc_build_*.log)"
  elif [ $ok -eq $ran ]; then result "ok ($ok llm.c runs, GPT-2 124M bf16 B 8 x T 1024, $LLMC_STEPS steps; bench.md)"
  else result "FAILED ($((ran - ok)) of $ran llm.c runs; logs/llmc_*.log)"; fi
}

# The table of train_gpt bf16, PyTorch and llm.c (whichever ran), into bench.md and the keys.
llmc_compare() {
  local args=() l
  for l in "$@"; do args+=(--llmc "$l"); done
  $REPORT compare --bench "$LOGS/bench_gpt2_bf16.log" --torch "$WORK/torch_bench.json" "${args[@]}" >"$WORK/compare.md"
  { echo "### GPT-2 124M bf16, B 8 x T 1024: train_gpt, PyTorch, llm.c"; echo; cat "$WORK/compare.md"; echo; } >>"$OUTDIR/bench.md"
  grep '^| [^-]' "$WORK/compare.md" | tail -n +2 >>"$STATE/keys"
}

# ---------------------------------------------------------------- ncu

stage_ncu() {
  gpu_or_skip || return
  command -v ncu >/dev/null || { result "skipped: ncu not found"; return; }
  local log=$LOGS/ncu.log times=$WORK/ncu_times metrics=$WORK/ncu_metrics pick rc re skip count
  local cmd=("$BUILD/train_gpt" bench --device=cuda --model=gpt2 --modes=bf16 --batch=8 --seq=1024 --repeats=1 --iters=3)
  local base=(ncu --clock-control none --target-processes all -f)
  # 1. Every launch's duration (one pass), then ranked.
  run_limited "$(limit 150)" "$log" "${base[@]}" --metrics gpu__time_duration.sum \
    --launch-count "$NCU_WINDOW" -o "$times" "${cmd[@]}"
  rc=$?
  [ -f "$times.ncu-rep" ] || { result "FAILED (ncu, durations: status $rc; logs/ncu.log)"; return; }
  ncu -i "$times.ncu-rep" --csv --page raw --print-units base --print-kernel-base function >"$LOGS/ncu_times.csv" 2>>"$log"
  pick=$($REPORT ncu-pick "$LOGS/ncu_times.csv" --top 5)
  re=$(sed -n 1p <<<"$pick") skip=$(sed -n 2p <<<"$pick") count=$(sed -n 3p <<<"$pick")
  if [ -z "$re" ] || [ "$re" = none ]; then result "FAILED (no kernel durations in logs/ncu_times.csv)"; return; fi
  # 2. Their counters: one launch per launch configuration; else their last launches.
  local m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
  run_limited "$(limit 150)" "$log" "${base[@]}" --metrics "$m" --kernel-name-base function \
    --kernel-name "regex:$re" --filter-mode per-launch-config --launch-count 1 -o "$metrics" "${cmd[@]}"
  rc=$?
  if [ ! -f "$metrics.ncu-rep" ] && [ "$(limit 150)" -ge 30 ]; then
    key "ncu --filter-mode per-launch-config: status $rc; their last launches in the window instead (skip $skip, count $count)"
    run_limited "$(limit 150)" "$log" "${base[@]}" --metrics "$m" --kernel-name-base function \
      --kernel-name "regex:$re" --launch-skip "$skip" --launch-count "$count" -o "$metrics" "${cmd[@]}"
    rc=$?
  fi
  [ -f "$metrics.ncu-rep" ] && ncu -i "$metrics.ncu-rep" --csv --page raw --print-units base \
    --print-kernel-base function >"$LOGS/ncu_metrics.csv" 2>>"$log"
  $REPORT ncu-table "$LOGS/ncu_times.csv" "$LOGS/ncu_metrics.csv" --top 5 >"$WORK/ncu.md"
  { echo "## ncu: the five slowest kernels of a bf16 step (GPT-2 124M, B 8 x T 1024)"; echo; cat "$WORK/ncu.md"; echo; } >>"$OUTDIR/profile.md"
  grep '^| [^-]' "$WORK/ncu.md" | tail -n +2 | cut -c1-220 >>"$STATE/keys"
  if [ -s "$LOGS/ncu_metrics.csv" ]; then result "ok (five kernels' DRAM bandwidth and SM throughput; profile.md, logs/ncu_*.csv)"
  else result "FAILED (counters: status $rc; durations only in profile.md; logs/ncu.log)"; fi
}
