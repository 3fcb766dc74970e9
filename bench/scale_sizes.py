"""What grows with the rank and node count, as longctx plans it: NCCL's buffers per
communicator (the prediction's "context.nccl.<group>" entries, planner/footprint/communication.h)
for Llama-3.1-8B on H100s, 8 to a node, at 8, 32 and 64 GPUs, on each stack.

    python3 bench/scale_sizes.py [--cli build/cli/longctx] [--gpus 8 32 64]

A benchmark of the model, not a test: it prints a Markdown table and asserts nothing.
"""
import argparse
import json
import os
import subprocess
import sys

GIB = 1 << 30

# Each stack's configuration across the GPUs: (label, flags for a world of n GPUs).
CONFIGS = [
    ("longctx, ZeRO-3 alone", lambda n: ["--stack", "longctx", "--sharding", "zero3"]),
    ("longctx, ZeRO-3 + Ulysses 8", lambda n: ["--stack", "longctx", "--sharding", "zero3", "--ulysses", "8"]),
    ("longctx, ZeRO-3 + Ulysses 8 + ring n/8", lambda n: ["--stack", "longctx", "--sharding", "zero3", "--ulysses", "8",
                                                           "--ring", str(n // 8)] if n > 8 else None),
    ("arctic, ZeRO-3", lambda n: ["--stack", "arctic", "--sharding", "zero3", "--attention", "flash_attention_2"]),
    ("arctic, ZeRO-3 + Ulysses 8", lambda n: ["--stack", "arctic", "--sharding", "zero3", "--ulysses", "8",
                                               "--attention", "flash_attention_2"]),
    ("arctic, ZeRO-3 + Ulysses 32", lambda n: ["--stack", "arctic", "--sharding", "zero3", "--ulysses", "32",
                                                "--attention", "flash_attention_2"] if n >= 32 else None),
    ("torchtitan, FSDP2", lambda n: ["--stack", "torchtitan", "--sharding", "zero3"]),
    ("torchtitan, FSDP2 + context parallel 8", lambda n: ["--stack", "torchtitan", "--sharding", "zero3", "--ring", "8"]),
]


def nccl_parts(cli, n, flags):
    cmd = [cli, "plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--gpus", str(n), "--gpus-per-node", "8",
           "--seq", "65536", "--checkpoint", "full", "--no-search", "--json", "--host-mem", "1000TiB"] + flags
    out = subprocess.run(cmd, capture_output=True, text=True)
    try:
        j = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "no plan"
    pred = j.get("prediction") or j["plan"]["prediction"]
    return {k[len("context.nccl."):]: v for k, v in pred["breakdown"].items() if k.startswith("context.nccl.")}, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "longctx"))
    ap.add_argument("--gpus", type=int, nargs="+", default=[8, 32, 64])
    a = ap.parse_args()
    print("| stack | " + " | ".join(f"{n} GPUs" for n in a.gpus) + " |")
    print("| --- |" + " --- |" * len(a.gpus))
    for label, flags_of in CONFIGS:
        cells = []
        for n in a.gpus:
            flags = flags_of(n)
            if flags is None:
                cells.append("-")
                continue
            parts, err = nccl_parts(a.cli, n, flags)
            if parts is None:
                cells.append("refused: " + err)
                continue
            total = sum(parts.values())
            cells.append(f"{total / GIB:.3f} GiB (" + ", ".join(f"{k} {v / GIB:.3f}" for k, v in parts.items()) + ")")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
