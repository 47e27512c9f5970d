#!/usr/bin/env bash
# fuzz.sh: runs the libFuzzer targets (build/fuzz/fuzz_<target>, from `make fuzz`) one after
# another for SECONDS each, and prints a table of wall and CPU time, executions,
# coverage (cov: code edges, ft: features) and findings.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s; shard model_file checkpoint config hf_model)
#
# Each target starts from its seed corpus tests/fuzz/corpus/<target>/ plus what earlier runs
# found (build/fuzz/corpus/<target>/, where new inputs go); crash, leak, timeout and OOM
# inputs land in build/fuzz/artifacts/<target>/ and the log in build/fuzz/logs/<target>.log.
# A finding is a crash, a sanitizer report, an escaped exception, more than 10 s on one
# input, more than 2 GiB resident or a single allocation over 1 GiB (slow-unit-* files are
# only reports). Exit status 1 when any target had a finding. The fuzzers run one at a
# time, under nice.
set -u
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(shard model_file checkpoint config hf_model)

declare -A MAX_LEN=([shard]=4096 [model_file]=8192 [checkpoint]=16384 [config]=4096 [hf_model]=16384)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

TIMES=$(mktemp)
trap 'rm -f "$TIMES"' EXIT

# Sets CPU_NOW: user+system seconds of this shell's finished children (the fuzzers).
cpu_now() {
  times >"$TIMES"
  CPU_NOW=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m");
    print int(u[1] * 60 + u[2] + s[1] * 60 + s[2]) }' "$TIMES")
}

# One libFuzzer run of target $1 for $2 seconds, appended to its log; sets RC.
fuzz_once() {
  local t=$1 secs=$2 scratch dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/tg_fuzz_run_XXXXXX")
  TMPDIR=$scratch nice -n 10 "build/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -timeout=10 -max_len="${MAX_LEN[$t]:-4096}" -print_final_stats=1 \
    -artifact_prefix="build/fuzz/artifacts/$t/" "${dict[@]}" "build/fuzz/corpus/$t" \
    "tests/fuzz/corpus/$t" >>"build/fuzz/logs/$t.log" 2>&1
  RC=$?
  rm -rf "$scratch"
}

# A timeout that does not reproduce (the process was stopped or starved for a while, as on
# a shared machine) is set aside under build/fuzz/spurious/ and the run continues.
spurious_timeout() {
  local t=$1 f
  f=$(ls -t "build/fuzz/artifacts/$t"/timeout-* 2>/dev/null | head -1)
  [ -n "$f" ] || return 1
  if timeout 10 "build/fuzz/fuzz_$t" "$f" >/dev/null 2>&1; then
    mkdir -p build/fuzz/spurious
    mv "$f" build/fuzz/spurious/
    return 0
  fi
  return 1
}

findings() { ls "build/fuzz/artifacts/$1" | grep -vc '^slow-unit-'; }

# Fuzzes target $1 for SECONDS_EACH seconds of wall time, or until a finding; adds a line
# to SUMMARY (with the CPU seconds the fuzzer got: less on a busy machine).
fuzz_target() {
  local t=$1 log=build/fuzz/logs/$1.log before begin cpu0 left skipped=0
  mkdir -p "build/fuzz/corpus/$t" "build/fuzz/artifacts/$t" build/fuzz/logs
  : >"$log"
  before=$(findings "$t")
  echo "fuzz.sh: $t for ${SECONDS_EACH}s (log $log)"
  begin=$(date +%s)
  cpu_now
  cpu0=$CPU_NOW
  left=$SECONDS_EACH
  while :; do
    fuzz_once "$t" "$left"
    left=$((SECONDS_EACH - ($(date +%s) - begin)))
    [ "$RC" -eq 0 ] && break
    spurious_timeout "$t" || break
    skipped=$((skipped + 1))
    RC=0
    echo "fuzz.sh: $t: a timeout did not reproduce (set aside); continuing" | tee -a "$log"
    [ "$left" -gt 5 ] || break
  done
  cpu_now
  local last execs cov ft
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | awk '{s += $1} END {print s}')
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  [ "$RC" -ne 0 ] && STATUS=1
  SUMMARY+=("$(printf '%-11s %6ss %6ss %12s %7s %7s %4s %8s %8s' "$t" "$(($(date +%s) - begin))" \
    "$((CPU_NOW - cpu0))" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$RC" "$(($(findings "$t") - before))" \
    "$skipped")")
}

SUMMARY=()
STATUS=0
for t in "${TARGETS[@]}"; do
  if [ ! -x "build/fuzz/fuzz_$t" ]; then
    echo "fuzz.sh: build/fuzz/fuzz_$t is missing (run make fuzz)" >&2
    exit 2
  fi
  fuzz_target "$t"
done

printf '\n%-11s %7s %7s %12s %7s %7s %4s %8s %8s\n' target wall cpu execs cov ft rc findings \
  spurious
printf '%s\n' "${SUMMARY[@]}"
[ "$STATUS" -ne 0 ] && echo "fuzz.sh: findings under build/fuzz/artifacts/ (logs in build/fuzz/logs/)"
exit "$STATUS"
