"""Peak memory of Hugging Face transformers training steps on a CUDA GPU, phase by phase.

    python3 bench/hf_gpu_peaks.py OUT.json                     (on a GPU: measure)
    python3 bench/hf_gpu_peaks.py --compare OUT.json [--cli C]  (anywhere: beside `--stack hf`)

Each case builds a model from its config with random weights on the GPU (pure bf16 or fp32
weights, torch AdamW), runs one step so the optimizer's state exists, then a second step
with the caching allocator's peak reset at each phase boundary: forward with the loss,
backward, optimizer step with zero_grad. It records torch.cuda.max_memory_allocated per
phase, the step's max_memory_reserved, and the device memory in use as the driver reports it
(torch.cuda.mem_get_info: what nvidia-smi shows for this process, its CUDA context included).

A measurement, not a test: it asserts nothing. --compare plans each measured case with
`longctx plan --stack hf` on the h100-80gb preset and prints the measured and predicted
allocated peak, reserved and in-use figures as docs/validation-gpu.md shows them.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072)
QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=131072)

QWEN2_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0,
                 rms_norm_eps=1e-6, max_position_embeddings=131072)

# name, architecture, shape, attention, checkpointing, attention_mask, seq, micro-batch, dtype, optimizer
CASES = [
    ("llama1b-sdpa-plain-8k", "llama", LLAMA_1B, "sdpa", "none", True, 8192, 1, "bf16", "adamw_torch_fused"),
    ("llama1b-sdpa-nonreentrant-32k", "llama", LLAMA_1B, "sdpa", "non-reentrant", True, 32768, 1, "bf16", "adamw_torch_fused"),
    ("llama1b-sdpa-reentrant-nomask-16k", "llama", LLAMA_1B, "sdpa", "reentrant", False, 16384, 1, "bf16", "adamw_torch"),
    ("llama1b-eager-nonreentrant-4k", "llama", LLAMA_1B, "eager", "non-reentrant", True, 4096, 1, "bf16", "adamw_torch_fused"),
    ("llama1b-sdpa-plain-fp32-4k", "llama", LLAMA_1B, "sdpa", "none", True, 4096, 1, "fp32", "adamw_torch_fused"),
    ("qwen3-0.6b-sdpa-nonreentrant-16k", "qwen3", QWEN3_06B, "sdpa", "non-reentrant", True, 16384, 1, "bf16", "adamw_torch_fused"),
    ("qwen3-0.6b-sdpa-plain-4kx2", "qwen3", QWEN3_06B, "sdpa", "none", False, 4096, 2, "bf16", "adamw_torch"),
    ("qwen2.5-0.5b-sdpa-nonreentrant-24k", "qwen2", QWEN2_05B, "sdpa", "non-reentrant", True, 24576, 1, "bf16", "adamw_torch_fused"),
    ("llama1b-sdpa-reentrant-48k", "llama", LLAMA_1B, "sdpa", "reentrant", True, 49152, 1, "bf16", "adamw_torch"),
]


def run_case(name, arch, shape, attention, checkpointing, mask, seq, batch, dtype, optimizer):
    import torch
    import transformers
    configs = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}
    config = configs[arch](attn_implementation=attention, **shape)
    torch.manual_seed(0)
    torch_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch_dtype)
    if checkpointing != "none":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=optimizer == "adamw_torch_fused" or None)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    inputs = {"input_ids": ids, "labels": ids}
    if mask:
        inputs["attention_mask"] = torch.ones_like(ids)

    def step(phases):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        before = torch.cuda.memory_allocated()
        loss = model(**inputs).loss
        torch.cuda.synchronize()
        phases["forward"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        phases["backward"] = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        phases["optimizer"] = torch.cuda.max_memory_allocated()
        return before, time.perf_counter() - start, loss.item()

    step({})
    torch.cuda.reset_peak_memory_stats()
    phases = {}
    before, seconds, loss = step(phases)
    free, total = torch.cuda.mem_get_info()
    result = dict(name=name, arch=arch, config=config.to_dict(), attention=attention, checkpointing=checkpointing,
                  attention_mask=mask, seq=seq, micro_batch=batch, dtype=dtype, optimizer=optimizer,
                  allocated_before_step=before, phases_max_allocated=phases,
                  max_allocated=max(phases.values()), max_reserved=torch.cuda.max_memory_reserved(),
                  device_used_driver=total - free, step_seconds=seconds, loss=loss)
    del model, opt, inputs, ids
    torch.cuda.empty_cache()
    return result


def compare(path, cli):
    gib = 1 << 30
    print("| case | allocated GiB, measured / predicted | reserved GiB | in use (driver) GiB |")
    print("| --- | --- | --- | --- |")
    for c in json.load(open(path))["cases"]:
        if "error" in c:
            print(f"| {c['name']} | {c['error'][:80]} | | |")
            continue
        with tempfile.TemporaryDirectory() as d:
            config = os.path.join(d, "config.json")
            with open(config, "w") as f:
                json.dump(c["config"], f)
            args = [cli, "plan", "--json", "--stack", "hf", "--model", config, "--gpus", "1", "--seq", str(c["seq"]),
                    "--micro-batch", str(c["micro_batch"]), "--no-search", "--dtype", c["dtype"], "--attention",
                    c["attention"], "--hf-optimizer", c["optimizer"], "--techniques", "checkpoint"]
            if c["checkpointing"] != "none":
                args += ["--checkpoint", "full", "--hf-checkpointing", c["checkpointing"]]
            if not c["attention_mask"]:
                args += ["--hf-no-attention-mask"]
            out = subprocess.run(args, capture_output=True, text=True)
        if out.returncode not in (0, 3):  # 3: planned, does not fit
            print(f"| {c['name']} | plan failed: {out.stderr.strip()[:80]} | | |")
            continue
        p = json.loads(out.stdout)["prediction"]
        err = (p["peak_device_bytes"] - c["max_allocated"]) / c["max_allocated"]
        print(f"| {c['name']} | {c['max_allocated'] / gib:.2f} / {p['peak_device_bytes'] / gib:.2f} ({err:+.1%}) | "
              f"{c['max_reserved'] / gib:.2f} / {p['peak_reserved_bytes'] / gib:.2f} | "
              f"{c['device_used_driver'] / gib:.2f} / {p['peak_nvidia_smi_bytes'] / gib:.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--compare", action="store_true", help="plan each measured case and print both")
    ap.add_argument("--cli", default="build/cli/longctx")
    a = ap.parse_args()
    if a.compare:
        compare(a.out, a.cli)
        return
    import torch
    import transformers
    out = a.out
    results = dict(torch=torch.__version__, transformers=transformers.__version__,
                   device=torch.cuda.get_device_name(0), cases=[])
    for case in CASES:
        try:
            r = run_case(*case)
        except Exception as e:  # one case's failure (out of memory, say) is a result too
            r = dict(name=case[0], error=f"{type(e).__name__}: {e}")
            torch.cuda.empty_cache()
        print(json.dumps({k: v for k, v in r.items() if k != "config"}), flush=True)
        results["cases"].append(r)
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
