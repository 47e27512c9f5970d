# gpu_check_fp8.sh: scripts/gpu/gpu_check.sh's fp8 stage (sourced by it; uses its helpers and
# variables). On the first H200 call cuBLASLt refused every per-tensor FP8 GEMM train_gpt
# launched although its heuristic offered 4 to 8 algorithms (docs/gpu-results.md). This stage
# settles why in one call, whatever the cause, and writes fp8.md: which of these ran
#   1. the probe's FP8 launches (scripts/gpu/cublaslt_probe.cu launches): every algorithm the
#      heuristic offers, E4M3 x E4M3 and E4M3 x E5M2, scale pointers at 0, 4, 16 and 64-byte
#      offsets, two workspace sizes, under cuBLASLt's own log (CUBLASLT_LOG_MASK: errors,
#      hints, heuristics and the API trace, which records each call's arguments);
#   2. the same shapes through PyTorch's torch._scaled_mm, with and without bias and fast
#      accumulation (scripts/gpu/torch_scaled_mm_probe.py), which builds its own descriptors;
#   3. one train_gpt fp8 step of GPT-2 124M (B 8 x T 1024) under cuBLASLt's log.
# The first error lines of each cuBLASLt log go into fp8.md, the logs themselves into logs/.

# "N of M" algorithm launches that ran, over the probe's launch lines.
fp8_launch_counts() {
  local ran offered
  ran=$(grep '^launch ' "$1" | grep -o ' ok' | wc -l)
  offered=$(grep '^launch ' "$1" | grep -oE ' (ok|REFUSED)' | wc -l)
  printf '%s of %s' "$ran" "$offered"
}

fp8_build_probe() {  # the probe stage's binary, built here when that stage did not run
  [ -x "$WORK/cublaslt_probe" ] && return 0
  local lib=$CUDA_HOME/targets/x86_64-linux/lib
  run_limited "$(limit 60)" "$1" nvcc -O2 -arch=sm_90 scripts/gpu/cublaslt_probe.cu \
    -L"$lib" -L"$CUDA_HOME/lib64" -lcublasLt -Xlinker -rpath,"$lib:$CUDA_HOME/lib64" \
    -o "$WORK/cublaslt_probe"
}

fp8_errors() {  # the first error lines of a cuBLASLt log
  [ -f "$1" ] || { echo "(no log)"; return; }
  grep -iE '\[error\]|error|fail|not supported' "$1" | head -20 | cut -c1-300
  [ -s "$1" ] || echo "(empty)"
}

stage_fp8() {
  [ "${GPU:-0}" = 1 ] || { result "skipped: no GPU"; return; }
  local probe_log=$LOGS/fp8_probe.txt torch_log=$LOGS/fp8_torch.txt step_log=$LOGS/fp8_step.log
  local md=$OUTDIR/fp8.md step_rc=skipped launches
  fp8_build_probe "$probe_log" || { result "FAILED (nvcc; logs/fp8_probe.txt)"; return; }
  CUBLASLT_LOG_MASK=31 CUBLASLT_LOG_FILE=$LOGS/fp8_cublaslt_probe.log \
    run_limited "$(limit 60)" "$probe_log" "$WORK/cublaslt_probe" launches
  [ -n "${TORCH_PY:-}" ] &&
    run_limited "$(limit 90)" "$torch_log" "$TORCH_PY" scripts/gpu/torch_scaled_mm_probe.py \
      --json "$WORK/fp8_torch.json"
  if [ "${BUILT_train_gpt:-0}" = 1 ] && [ "${BUILT_libtrain_gpt_cuda_so:-0}" = 1 ]; then
    CUBLASLT_LOG_MASK=13 CUBLASLT_LOG_FILE=$LOGS/fp8_cublaslt_step.log \
      run_limited "$(limit 90)" "$step_log" "$BUILD/train_gpt" bench --device=cuda --model=gpt2 \
      --modes=fp8 --batch=8 --seq=1024 --repeats=1 --iters=1
    step_rc=$?
  fi
  launches=$(fp8_launch_counts "$probe_log")
  {
    echo "# The per-tensor FP8 refusal: which GEMMs ran"
    echo
    echo "## cuBLASLt, the probe's launches: $launches algorithm launches ran"
    echo
    grep '^launch ' "$probe_log" | sed 's/^/    /'
    echo
    echo "cuBLASLt's log (logs/fp8_cublaslt_probe.log), first errors:"
    echo
    fp8_errors "$LOGS/fp8_cublaslt_probe.log" | sed 's/^/    /'
    echo
    echo "## torch._scaled_mm (${TORCH_PY:-no torch})"
    echo
    grep -E '^torch |skipped' "$torch_log" 2>/dev/null | sed 's/^/    /'
    echo
    echo "## One train_gpt fp8 step, GPT-2 124M (status $step_rc)"
    echo
    grep -E 'path: |error|refused|REFUSED|cuBLASLt' "$step_log" 2>/dev/null | head -20 | cut -c1-300 |
      sed 's/^/    /'
    echo
    echo "cuBLASLt's log (logs/fp8_cublaslt_step.log), first errors:"
    echo
    fp8_errors "$LOGS/fp8_cublaslt_step.log" | sed 's/^/    /'
  } >"$md"
  key "cuBLASLt FP8 launches: $launches ran (logs/fp8_probe.txt)"
  key "torch._scaled_mm: $(grep -c '^torch .*: ok' "$torch_log" 2>/dev/null || echo 0) of $(grep -c '^torch .* e[45]m' "$torch_log" 2>/dev/null || echo 0) FP8 cases ran"
  key "train_gpt fp8 step: status $step_rc$([ "$step_rc" = 0 ] || echo ": $(grep -v '^+' "$step_log" 2>/dev/null | tail -1 | cut -c1-200)")"
  result "ok (fp8.md)"
}
