#!/usr/bin/env bash
# Soak: does a long `longctx run` keep its memory flat? Runs STEPS training steps of a tiny
# plan on the CPU virtual device and samples the process's resident set (VmRSS) once a
# second, with the step it had reached; prints the RSS after the warm-up steps, at the end,
# and the growth per step between the two. A benchmark, not a test: it asserts nothing.
#   bench/soak_rss.sh [STEPS] [LONGCTX]      (defaults: 20000, build/cli/longctx)
set -euo pipefail
steps="${1:-20000}"
longctx="${2:-build/cli/longctx}"
warmup=200
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT

"$longctx" plan --model tiny-gqa --gpu cpu --gpus 1 --seq 128 --budget 64MiB -o "$tmp/plan.json" >/dev/null
# `longctx run` execs longctx-runtime: the pid stays the same.
"$longctx" run --plan "$tmp/plan.json" --steps "$steps" --threads 1 >"$tmp/progress" 2>"$tmp/err" &
pid=$!

step_now() { tail -c 200 "$tmp/progress" 2>/dev/null | grep -o 'step [0-9]*' | tail -1 | cut -d' ' -f2 || true; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true; }

first_step="" first_rss="" mid_step="" mid_rss="" last_step="" last_rss=""
t0=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
  s=$(step_now); r=$(rss_kib)
  if [ -n "$s" ] && [ -n "$r" ]; then
    if [ -z "$first_step" ] && [ "$s" -ge "$warmup" ]; then first_step=$s first_rss=$r; fi
    if [ -z "$mid_step" ] && [ "$s" -ge $((steps / 2)) ]; then mid_step=$s mid_rss=$r; fi
    last_step=$s last_rss=$r
  fi
  sleep 1
done
wait "$pid" || { echo "the run failed:"; cat "$tmp/err"; exit 1; }
secs=$(( $(date +%s) - t0 ))
if [ -z "$first_step" ] || [ "$last_step" = "$first_step" ]; then
  echo "too few samples (first $first_step, last $last_step): ask for more steps"; exit 1
fi
# Over the whole run after the warm-up, and over its second half alone: growth that slows
# down (allocator caches filling) shows as a smaller second-half figure; a leak does not.
report() {
  awk -v s0="$1" -v r0="$2" -v s1="$3" -v r1="$4" -v what="$5" 'BEGIN {
    printf "%s: steps %d..%d, RSS %.1f MiB -> %.1f MiB, growth %.1f bytes/step (%.1f MiB per million steps)\n",
           what, s0, s1, r0 / 1024, r1 / 1024, (r1 - r0) * 1024 / (s1 - s0), (r1 - r0) * 1024 / (s1 - s0) * 1e6 / 1048576
  }'
}
echo "$steps steps in $secs s"
report "$first_step" "$first_rss" "$last_step" "$last_rss" "after warm-up"
[ -n "$mid_step" ] && [ "$mid_step" != "$last_step" ] && report "$mid_step" "$mid_rss" "$last_step" "$last_rss" "second half" || true
