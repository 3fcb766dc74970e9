"""Does the cost model rank plans as they run? Plans a grid of plans on the CPU virtual device
with a calibrated preset (`longctx calibrate -o PRESET`), runs each, and puts the predicted step
time beside the measured one; then, for a few `plan` queries, runs the three fastest plans the
search returns and checks that the one it picked is the fastest measured or within 5% of it.

    python3 bench/cost_model_proof.py [PRESET.json] [--longctx build/cli/longctx] [--steps 4] [--rounds 3]

Without PRESET each round first calibrates for each rank count the plans use (`longctx
calibrate --nproc G --seconds 1`: two ranks' kernels run beside each other, as in a two-rank
run) and plans the grid with those rates, then runs it: a shared machine's speed drifts from
minute to minute (by 10-20% over an hour here, and the probes not always as the steps), so a
round's prediction is made beside the runs it predicts. Every plan is run in each of --rounds
rounds; its error is the median over the rounds of each round's error, its predicted and
measured times the medians of theirs, and the spread of the measured times across rounds is
printed beside them. The `plan` queries are searched once, with the first round's rates.

A benchmark, not a test: it prints figures (docs/performance.md records them) and asserts
nothing. Measured step time: the median of a run's steps after the first (the first pays for
allocations and LibTorch's lazy setup). Every run uses one intra-op thread, as calibrate does.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (model, seq, gpus, knobs): shapes, lengths and techniques that change which op dominates.
GRID = [
    ("tiny-gqa", 2048, 1, {}),
    ("tiny-gqa", 4096, 1, {}),
    ("tiny-gqa", 8192, 1, {}),
    ("tiny-gqa", 8192, 1, {"checkpoint": "full"}),
    ("tiny-gqa", 8192, 1, {"checkpoint": "full", "offload-checkpoints": True}),
    ("tiny-gqa", 8192, 1, {"mlp-tiles": 4, "loss-tiles": 4}),
    ("tiny-gqa", 4096, 1, {"offload-optimizer": True}),
    ("tiny-gqa", 12288, 1, {"checkpoint": "every:2"}),
    ("tiny-odd", 2048, 1, {}),
    ("tiny-odd", 6144, 1, {}),
    ("tiny-odd", 6144, 1, {"checkpoint": "full", "loss-tiles": 3}),
    ("tiny-bias", 4096, 1, {}),
    ("tiny-bias", 8192, 1, {"checkpoint": "full"}),
    ("tiny-qwen2", 4096, 1, {}),
    ("tiny-qwen2", 8192, 1, {"mlp-tiles": 2}),
    ("tiny-gqa", 4096, 2, {"ulysses": 2}),
    ("tiny-gqa", 8192, 2, {"ulysses": 2, "checkpoint": "full"}),
    ("tiny-gqa", 4096, 2, {"sharding": "zero2"}),
    ("tiny-gqa", 4096, 2, {"sharding": "zero3"}),
    ("tiny-odd", 4096, 2, {"ulysses": 2, "sharding": "zero3"}),
    ("tiny-gqa", 8192, 2, {"ulysses": 2, "head-chunk": 1}),
    ("tiny-bias", 6144, 2, {"ulysses": 2, "mlp-tiles": 3}),
]

# (model, seq, gpus, budget) queries whose top three plans are run.
QUERIES = [
    ("tiny-gqa", 8192, 1, "64MiB"),
    ("tiny-gqa", 16384, 1, "96MiB"),
    ("tiny-odd", 8192, 1, "48MiB"),
    ("tiny-bias", 8192, 2, "48MiB"),
    ("tiny-gqa", 12288, 2, "64MiB"),
]


def knob_flags(knobs):
    flags = []
    for k, v in knobs.items():
        if v is True:
            flags.append(f"--{k}")
        elif v is not False:
            flags += [f"--{k}", str(v)]
    return flags


def parallel_flags(parallel):
    """A search result's parallel section as plan flags."""
    knobs = {k.replace("_", "-"): v for k, v in parallel.items()}
    return knob_flags({k: v for k, v in knobs.items() if v not in (False,)})


class Bench:
    def __init__(self, longctx, preset, steps, tmp):
        self.longctx, self.preset, self.steps, self.tmp = longctx, preset, steps, tmp
        self.n = 0
        self.presets = {}

    def calibrate(self, gpus, round_=0):
        """The preset for plans of `gpus` ranks in round `round_`: the one given, else one
        measured for that rank count at the start of the round."""
        if self.preset:
            return self.preset
        if (gpus, round_) in self.presets:
            return self.presets[(gpus, round_)]
        path = os.path.join(self.tmp, f"calibrated-{gpus}-{round_}.json")
        cmd = [self.longctx, "calibrate", "--seconds", "1", "-o", path]
        if gpus > 1:
            cmd += ["--nproc", str(gpus)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()[-400:]}")
        self.presets[(gpus, round_)] = path
        return path

    def plan(self, model, seq, gpus, flags, budget="4GiB", search=False, round_=0):
        self.n += 1
        path = os.path.join(self.tmp, f"plan{self.n}.json")
        cmd = [self.longctx, "plan", "--model", model, "--gpu", self.calibrate(gpus, round_), "--gpus", str(gpus),
               "--seq", str(seq), "--budget", budget, "--json", "-o", path] + flags + ([] if search else ["--no-search"])
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
        return path, json.loads(out.stdout)

    def run(self, path, gpus):
        cmd = [self.longctx, "run", "--plan", path, "--steps", str(self.steps), "--threads", "1", "--json"]
        if gpus > 1:
            cmd += ["--nproc", str(gpus)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()[-400:]}")
        times = [s["time_s"] for s in json.loads(out.stdout)["steps"]]
        return statistics.median(times[1:])


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    for rank, i in enumerate(order):
        r[i] = float(rank)
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", nargs="?", help="a calibrated preset; default: calibrate for each rank count first")
    ap.add_argument("--longctx", default="build/cli/longctx")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        b = Bench(a.longctx, a.preset, a.steps, tmp)
        queries = []
        for model, seq, gpus, budget in QUERIES:
            _, plan = b.plan(model, seq, gpus, [], budget=budget, search=True)
            top = [plan["parallel"]] + [r["parallel"] for r in plan["search"].get("runners_up", [])[:2]]
            queries.append((" ".join(parallel_flags(top[0])),
                            [b.plan(model, seq, gpus, parallel_flags(p), budget=budget)[0] for p in top]))
        grid_times = [[] for _ in GRID]
        grid_predicted = [[] for _ in GRID]
        query_times = [[[] for _ in paths] for _, paths in queries]
        for r in range(a.rounds):
            print(f"round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
            plans = [b.plan(model, seq, gpus, knob_flags(knobs), round_=r) for model, seq, gpus, knobs in GRID]
            for i, (path, plan) in enumerate(plans):
                grid_predicted[i].append(plan["prediction"]["step_time_s"])
                grid_times[i].append(b.run(path, GRID[i][2]))
            for qi, (_, paths) in enumerate(queries):
                for pi, path in enumerate(paths):
                    query_times[qi][pi].append(b.run(path, QUERIES[qi][2]))

        print("| plan | predicted s | measured s (spread over rounds) | error |\n| --- | --- | --- | --- |")
        predicted, measured, errors = [], [], []
        for (model, seq, gpus, knobs), preds, times in zip(GRID, grid_predicted, grid_times):
            p, m = statistics.median(preds), statistics.median(times)
            err = statistics.median([(pr - t) / t for pr, t in zip(preds, times)])
            predicted.append(p)
            measured.append(m)
            errors.append(abs(err))
            name = f"{model} {seq} x{gpus} " + (" ".join(knob_flags(knobs)) or "plain")
            spread = 100 * (max(times) - min(times)) / m
            print(f"| {name} | {p:.3f} | {m:.3f} ({spread:.0f}%) | {100 * err:+.1f}% |", flush=True)
        print(f"\n{len(GRID)} plans: worst |error| {100 * max(errors):.1f}%, median {100 * statistics.median(errors):.1f}%, "
              f"within 15%: {sum(e <= 0.15 for e in errors)}; Spearman {spearman(predicted, measured):.3f}\n")

        print("| query | picked | measured s of the top three | picked within 5% of the fastest |\n| --- | --- | --- | --- |")
        for (model, seq, gpus, budget), (picked, _), times in zip(QUERIES, queries, query_times):
            medians = [statistics.median(t) for t in times]
            ok = medians[0] <= 1.05 * min(medians)
            print(f"| {model} {seq} x{gpus} {budget} | {picked} | {', '.join(f'{t:.3f}' for t in medians)} | "
                  f"{'yes' if ok else 'no'} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
