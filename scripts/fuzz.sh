#!/usr/bin/env bash
# Builds the planner's libFuzzer targets (clang, planner only, into build-fuzz/) and runs each
# for SECONDS (default 30) from seeds: models/, the plans in fuzz/corpus/plan and the names in
# fuzz/corpus/export. Fails on any crash, leak, timeout or sanitizer report, leaving the
# reproducer in build-fuzz/artifacts/. Prints the executions of each target.
#   LONGCTX_FUZZ_BUILD_DIR overrides the build folder; LONGCTX_JOBS the build's jobs (2);
#   LONGCTX_FUZZ_JOBS how many targets run at once (2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds="${1:-30}"
build="${LONGCTX_FUZZ_BUILD_DIR:-$root/build-fuzz}"
targets=(model_config_fuzzer plan_fuzzer evaluate_fuzzer export_fuzzer)
jobs="${LONGCTX_FUZZ_JOBS:-2}"
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "LONGCTX_FUZZ_JOBS: '$jobs' is not a count of targets at once; give 1 or more" >&2
  exit 2
fi

# shellcheck source=scripts/ccache_env.sh
. "$root/scripts/ccache_env.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  # No precompiled headers: clang's are named by absolute path inside -Xclang arguments, which
  # the compiler cache cannot make relative, so every clone would compile every source again.
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DLONGCTX_WITH_RUNTIME=OFF -DLONGCTX_FUZZ=ON -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON >&2
fi
cmake --build "$build" -j "${LONGCTX_JOBS:-2}" --target "${targets[@]}" >&2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$build/artifacts"
# One target's run, its output in $build/TARGET.log; its exit status is the fuzzer's.
fuzz_one() {
  local t=$1 corpus seeds
  corpus="$build/corpus/$t"   # grows between runs; the seeds in fuzz/ stay as committed
  mkdir -p "$corpus"
  case "$t" in
    model_config_fuzzer) seeds="$root/models" ;;      # the presets are the seeds
    *) seeds="$root/fuzz/corpus/${t%_fuzzer}" ;;
  esac
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$build/artifacts/$t-")
  case "$t" in model_config_fuzzer | plan_fuzzer) [ -f "$root/fuzz/json.dict" ] && args+=(-dict="$root/fuzz/json.dict") ;; esac
  local dirs=("$corpus")
  [ -d "$seeds" ] && dirs+=("$seeds")
  "$build/fuzz/$t" "${args[@]}" "${dirs[@]}" >"$build/$t.log" 2>&1
}

# The targets run LONGCTX_FUZZ_JOBS (2) at a time: each runs for its time whatever the load, so
# side by side they take half the wall time, and on a machine shared with other work each gets
# its share of the cores as a process of its own.
declare -A result
for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  batch=("${targets[@]:first:jobs}")
  declare -A pid=()
  for t in "${batch[@]}"; do
    fuzz_one "$t" &
    pid[$t]=$!
  done
  for t in "${batch[@]}"; do
    if wait "${pid[$t]}"; then result[$t]=ok; else result[$t]=FAILED; fi
  done
done

status=0
for t in "${targets[@]}"; do
  log="$build/$t.log"
  [ "${result[$t]}" = ok ] || status=1
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  printf '%-22s %-6s %12s executions in %ss\n' "$t" "${result[$t]}" "${execs:-?}" "$seconds"
  if [ "${result[$t]}" = FAILED ]; then
    echo "--- $log (last 40 lines)" >&2
    tail -n 40 "$log" >&2
  fi
done
exit $status
