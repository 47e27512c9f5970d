#!/usr/bin/env bash
# fuzz.sh: runs the libFuzzer targets (build/fuzz/fuzz_<target>, from `make fuzz`) one after
# another for SECONDS each, and prints a table of executions, coverage and findings.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s; shard model_file checkpoint config)
#
# Each target starts from its seed corpus tests/fuzz/corpus/<target>/ plus what earlier runs
# found (build/fuzz/corpus/<target>/, where new inputs go); crash, leak, timeout and OOM
# inputs land in build/fuzz/artifacts/<target>/ and the log in build/fuzz/logs/<target>.log.
# A finding is a crash, a sanitizer report, an escaped exception, more than 10 s on one
# input, more than 2 GiB resident or a single allocation over 1 GiB. Exit status 1 when any
# target had a finding. The fuzzers run one at a time, under nice.
set -u
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(shard model_file checkpoint config)

declare -A MAX_LEN=([shard]=4096 [model_file]=8192 [checkpoint]=16384 [config]=4096)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

summary=()
status=0
for t in "${TARGETS[@]}"; do
  bin=build/fuzz/fuzz_$t
  if [ ! -x "$bin" ]; then
    echo "fuzz.sh: $bin is missing (run make fuzz)" >&2
    exit 2
  fi
  corpus=build/fuzz/corpus/$t
  artifacts=build/fuzz/artifacts/$t
  log=build/fuzz/logs/$t.log
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  before=$(ls "$artifacts" | wc -l)
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/tg_fuzz_run_XXXXXX")
  echo "fuzz.sh: $t for ${SECONDS_EACH}s (log $log)"
  TMPDIR=$scratch nice -n 10 "$bin" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -timeout=10 -max_len="${MAX_LEN[$t]:-4096}" -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${dict[@]}" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  rm -rf "$scratch"
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  found=$(($(ls "$artifacts" | wc -l) - before))
  [ "$rc" -ne 0 ] && status=1
  summary+=("$(printf '%-11s %6ss %12s %7s %7s %5s %8s' "$t" "$SECONDS_EACH" "${execs:-?}" \
    "${cov:-?}" "${ft:-?}" "$rc" "$found")")
done

printf '\n%-11s %7s %12s %7s %7s %5s %8s\n' target time execs cov ft rc findings
printf '%s\n' "${summary[@]}"
[ "$status" -ne 0 ] && echo "fuzz.sh: findings under build/fuzz/artifacts/ (logs in build/fuzz/logs/)"
exit "$status"
