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
  # Several ranks (rank 0's trace; every rank's peak is in the run's log)
  "gqa-w2-dp2-ckpt-4k|tiny-gqa|2|4K|--checkpoint full"
  "gqa-w2-u2-8k|tiny-gqa|2|8K|--ulysses 2"
  "gqa-w2-u2-hc1-8k|tiny-gqa|2|8K|--ulysses 2 --head-chunk 1"
  "gqa-w4-u4-kvrep-8k|tiny-gqa|4|8K|--ulysses 4"
  "gqa-w2-zero1-4k|tiny-gqa|2|4K|--sharding zero1"
  "gqa-w2-u2-zero2-8k|tiny-gqa|2|8K|--ulysses 2 --sharding zero2"
  "gqa-w2-zero3-4k|tiny-gqa|2|4K|--sharding zero3"
  "odd-w4-u4-hc1-8k|tiny-odd|4|8K|--ulysses 4 --head-chunk 1"
  "odd-w2-u2-zero3-off-4k|tiny-odd|2|4K|--ulysses 2 --sharding zero3 --offload-params --offload-optimizer"
  "odd-w4-u2-dp2-all-8k|tiny-odd|4|8K|--ulysses 2 --sharding zero3 --checkpoint full --offload-checkpoints --mlp-tiles 4 --loss-tiles 4 --head-chunk 1"
  # Ring attention: alone, the hybrid with Ulysses, beside data parallelism
  "gqa-w2-r2-8k|tiny-gqa|2|8K|--ring 2"
  "odd-w3-r3-ckpt-6k|tiny-odd|3|6K|--ring 3 --checkpoint full"
  "odd-w4-u2-r2-8k|tiny-odd|4|8K|--ulysses 2 --ring 2"
  "gqa-w4-r2-dp2-all-8k|tiny-gqa|4|8K|--ring 2 --sharding zero3 --checkpoint full --offload-checkpoints --mlp-tiles 4 --loss-tiles 4"
)

rows=()
for entry in "${grid[@]}"; do
  IFS='|' read -r name model gpus seq knobs <<<"$entry"
  plan="$out/$name.plan.json"
  trace="$out/$name.trace.json"
  # shellcheck disable=SC2086
  "$longctx" plan --model "$model" --gpu cpu --gpus "$gpus" --seq "$seq" --budget 1GiB --host-mem 4GiB $knobs --no-search -o "$plan" >/dev/null
  ranks=()
  [ "$gpus" -gt 1 ] && ranks=(--nproc "$gpus")
  "$longctx" run --plan "$plan" --steps 2 --trace "$trace" "${ranks[@]}" >/dev/null 2>"$out/$name.log" || {
    echo "run failed: $name (see $out/$name.log)" >&2
    exit 1
  }
  rm -f "$out/$name.log" "$out/$name".trace.rank*.json
  label="$knobs"
  [ "$gpus" -gt 1 ] && label="--gpus $gpus $knobs"
  rows+=("$("$longctx" compare --plan "$plan" --trace "$trace" --json | tr -d '\n')|$name|$label")
  echo "$name done" >&2
done
printf '%s\n' "${rows[@]}" >"$out/grid.results"
echo "wrote $out (${#grid[@]} configurations)" >&2

# The table and the figure, from traces/grid.results.
python3 - "$out/grid.results" "$root/docs/validation-grid.md" "$root/docs/validation-grid.svg" <<'PY'
import json, math, sys
results, md_path, svg_path = sys.argv[1:4]
rows = []
for line in open(results):
    blob, name, knobs = line.rstrip("\n").split("|", 2)
    j = json.loads(blob)
    phases = [(p["phase"], p["error"]) for p in j["phases"] if p["error"] is not None]
    worst_phase = max(phases, key=lambda p: abs(p[1])) if phases else ("-", 0.0)
    rows.append((name, knobs or "(plain)", j["predicted_peak_bytes"], j["measured_peak_bytes"], j["error"],
                 j["same_peak_phase"], j["predicted_peak_phase"], j["measured_peak_phase"], worst_phase))
worst = max(rows, key=lambda r: abs(r[4]))
worst_in_phase = max(rows, key=lambda r: abs(r[8][1]))
with open(md_path, "w") as f:
    f.write("<!-- Written by scripts/validate.sh; do not edit. -->\n")
    f.write(f"{len(rows)} configurations on the CPU virtual device; worst peak error {100*worst[4]:+.3f}% ({worst[0]}); "
            f"worst error of a phase's peak {100*worst_in_phase[8][1]:+.3f}% ({worst_in_phase[0]}, {worst_in_phase[8][0]}).\n\n")
    f.write("| configuration | knobs | predicted bytes | measured bytes | error | peak phase (predicted / measured) | worst phase |\n")
    f.write("| --- | --- | ---: | ---: | ---: | --- | --- |\n")
    for name, knobs, p, m, e, same, pp, mp, wp in rows:
        f.write(f"| {name} | `{knobs}` | {p} | {m} | {100*e:+.3f}% | {pp}{'' if same else ' / ' + mp} | {wp[0]} {100*wp[1]:+.3f}% |\n")
lo = min(min(r[2], r[3]) for r in rows); hi = max(max(r[2], r[3]) for r in rows)
lo, hi = math.log10(lo) - 0.05, math.log10(hi) + 0.05
W, H, L, T = 620, 620, 80, 40
P = W - L - 30
def sx(v): return L + P * (math.log10(v) - lo) / (hi - lo)
def sy(v): return T + P * (1 - (math.log10(v) - lo) / (hi - lo))
s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
     '<rect width="100%" height="100%" fill="white"/>',
     f'<text x="{L}" y="24" font-size="15" font-weight="bold">Predicted against measured peak, {len(rows)} runs</text>',
     f'<line x1="{sx(10**lo)}" y1="{sy(10**lo)}" x2="{sx(10**hi)}" y2="{sy(10**hi)}" stroke="#999" stroke-dasharray="4,3"/>']
for k in range(int(math.floor(lo)), int(math.ceil(hi)) + 1):
    for m in (1, 2, 5):
        v = m * 10 ** k
        if 10 ** lo <= v <= 10 ** hi:
            s.append(f'<text x="{sx(v)}" y="{T + P + 16}" text-anchor="middle">{v/2**20:.3g} MiB</text>')
            s.append(f'<text x="{L - 6}" y="{sy(v) + 4}" text-anchor="end">{v/2**20:.3g} MiB</text>')
for name, knobs, p, m, e, same, pp, mp, wp in rows:
    s.append(f'<circle cx="{sx(m):.1f}" cy="{sy(p):.1f}" r="4" fill="{"#1f77b4" if abs(e) <= 0.01 else "#d62728"}"><title>{name}: {100*e:+.3f}%</title></circle>')
s.append(f'<text x="{L + P/2}" y="{H - 8}" text-anchor="middle">measured peak (log)</text>')
s.append(f'<text x="16" y="{T + P/2}" transform="rotate(-90 16 {T + P/2})" text-anchor="middle">predicted peak (log)</text>')
s.append("</svg>")
open(svg_path, "w").write("\n".join(s) + "\n")
print(f"worst error {100*worst[4]:+.3f}% ({worst[0]})")
PY
