#!/usr/bin/env bash
# The validation grid: plans of small Llama-shaped models on the CPU virtual device, each run
# for real and held against its prediction. Writes traces/NAME.plan.json and
# traces/NAME.trace.json for every configuration, then docs/validation-grid.md (the table)
# and docs/validation-grid.svg (predicted against measured, every point).
#
# Usage: scripts/validate.sh [BUILD_DIR]   (default build/; run scripts/build.sh first)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${1:-$root/build}"
longctx="$build/cli/longctx"
out="$root/traces"
mkdir -p "$out"

# name | model | gpus | seq | knobs
grid=(
  "gqa-plain-2k|tiny-gqa|1|2K|"
  "gqa-plain-4k|tiny-gqa|1|4K|"
  "gqa-plain-8k|tiny-gqa|1|8K|"
  "gqa-mb2-2k|tiny-gqa|1|2K|--micro-batch 2"
  "gqa-ckpt-4k|tiny-gqa|1|4K|--checkpoint full"
  "gqa-ckpt-every2-4k|tiny-gqa|1|4K|--checkpoint every:2"
  "gqa-ckpt-off-4k|tiny-gqa|1|4K|--checkpoint full --offload-checkpoints"
  "gqa-mlp4-4k|tiny-gqa|1|4K|--mlp-tiles 4"
  "gqa-mlp16-8k|tiny-gqa|1|8K|--mlp-tiles 16"
  "gqa-loss4-4k|tiny-gqa|1|4K|--loss-tiles 4"
  "gqa-loss16-8k|tiny-gqa|1|8K|--loss-tiles 16"
  "gqa-hc1-4k|tiny-gqa|1|4K|--head-chunk 1"
  "gqa-hc2-4k|tiny-gqa|1|4K|--head-chunk 2"
  "gqa-hc4-4k|tiny-gqa|1|4K|--head-chunk 4"
  "gqa-optoff-4k|tiny-gqa|1|4K|--offload-optimizer"
  "gqa-paramoff-4k|tiny-gqa|1|4K|--sharding zero3 --offload-params"
  "gqa-zero3-4k|tiny-gqa|1|4K|--sharding zero3"
  "gqa-all-8k|tiny-gqa|1|8K|--checkpoint full --offload-checkpoints --mlp-tiles 8 --loss-tiles 8 --head-chunk 1 --offload-optimizer"
  "gqa-all-16k|tiny-gqa|1|16K|--checkpoint full --offload-checkpoints --mlp-tiles 16 --loss-tiles 16 --head-chunk 1"
  "gqa-ckpt-tiles-8k|tiny-gqa|1|8K|--checkpoint full --mlp-tiles 4 --loss-tiles 4"
  "odd-plain-2k|tiny-odd|1|2K|"
  "odd-plain-6k|tiny-odd|1|6K|"
  "odd-mb2-3k|tiny-odd|1|3K|--micro-batch 2"
  "odd-ckpt-4k|tiny-odd|1|4K|--checkpoint full"
  "odd-ckpt-every2-4k|tiny-odd|1|4K|--checkpoint every:2"
  "odd-ckpt-every3-6k|tiny-odd|1|6K|--checkpoint every:3"
  "odd-ckpt-off-4k|tiny-odd|1|4K|--checkpoint full --offload-checkpoints"
  "odd-mlp2-4k|tiny-odd|1|4K|--mlp-tiles 2"
  "odd-mlp8-4k|tiny-odd|1|4K|--mlp-tiles 8"
  "odd-loss2-4k|tiny-odd|1|4K|--loss-tiles 2"
  "odd-loss8-6k|tiny-odd|1|6K|--loss-tiles 8"
  "odd-hc1-4k|tiny-odd|1|4K|--head-chunk 1"
  "odd-hc2-4k|tiny-odd|1|4K|--head-chunk 2"
  "odd-hc4-4k|tiny-odd|1|4K|--head-chunk 4"
  "odd-hc8-4k|tiny-odd|1|4K|--head-chunk 8"
  "odd-optoff-4k|tiny-odd|1|4K|--offload-optimizer"
  "odd-zero3-off-4k|tiny-odd|1|4K|--sharding zero3 --offload-params --offload-optimizer"
  "odd-all-8k|tiny-odd|1|8K|--checkpoint full --offload-checkpoints --mlp-tiles 8 --loss-tiles 8 --head-chunk 1"
  "odd-all-12k|tiny-odd|1|12K|--checkpoint full --offload-checkpoints --mlp-tiles 12 --loss-tiles 12 --head-chunk 2 --offload-optimizer"
  "odd-ckpt-hc-6k|tiny-odd|1|6K|--checkpoint every:2 --head-chunk 1 --mlp-tiles 2"
  "odd-bf16-4k|tiny-odd|1|4K|--dtype bf16"
  "gqa-bf16-all-8k|tiny-gqa|1|8K|--dtype bf16 --checkpoint full --mlp-tiles 4 --loss-tiles 4 --head-chunk 1"
)

rows=()
for entry in "${grid[@]}"; do
  IFS='|' read -r name model gpus seq knobs <<<"$entry"
  plan="$out/$name.plan.json"
  trace="$out/$name.trace.json"
  # shellcheck disable=SC2086
  "$longctx" plan --model "$model" --gpu cpu --gpus "$gpus" --seq "$seq" --budget 1GiB --host-mem 4GiB $knobs --no-search -o "$plan" >/dev/null
  "$longctx" run --plan "$plan" --steps 2 --trace "$trace" --threads 1 >/dev/null 2>"$out/$name.log" || {
    echo "run failed: $name (see $out/$name.log)" >&2
    exit 1
  }
  rm -f "$out/$name.log"
  rows+=("$("$longctx" compare --plan "$plan" --trace "$trace" --json | tr -d '\n')|$name|$knobs")
  echo "$name done" >&2
done
printf '%s\n' "${rows[@]}" >"$out/grid.results"
echo "wrote $out (${#grid[@]} configurations)" >&2
