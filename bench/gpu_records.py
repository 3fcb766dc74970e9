"""Published GPU peak-memory records held against longctx's prediction.

    python3 bench/gpu_records.py RECORDS.json [--markdown] [--cli build/cli/longctx]

RECORDS.json is a list of measured runs, each with its full configuration (the fields read
below: model_config, seq_len, num_gpus, gpu, dtype, parallelism, activation_checkpointing,
optimizer, param_offload_to_cpu, tiled_mlp, loss, value_GB or value_MiB, measured). Each
record becomes the longctx configuration that runs the same techniques (`configuration`),
planned without search on the record's GPU, so that the caching allocator's model releases
its cache when memory runs short, as PyTorch's does (a plan that does not fit still has its
prediction, requests that fail booked anyway). Each published figure is held to the prediction of the
same kind: torch.cuda.max_memory_allocated to allocated, nvidia-smi (or a method not stated)
to the nvidia-smi figure. Nothing here is fitted to the published figures: they are only
printed beside the prediction. A benchmark, not a test: it asserts nothing.
"""
import argparse
import json
import math
import re
import os
import statistics
import subprocess
import sys
import tempfile

GIB = 1 << 30


def model_dict(r):
    """The record's model as a transformers config.json."""
    m = r["model_config"]
    qwen3 = r["model"].lower().startswith("qwen3")
    return {
        "model_type": "qwen3" if qwen3 else "llama",
        "hidden_size": m["hidden"], "intermediate_size": m["intermediate"], "num_hidden_layers": m["layers"],
        "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"], "head_dim": m["head_dim"],
        "vocab_size": m["vocab"], "tie_word_embeddings": bool(m.get("tied_embeddings", False)),
        "max_position_embeddings": max(r["seq_len"], 8192), "rms_norm_eps": 1e-6, "hidden_act": "silu",
    }


def liger_loss_chunks(tokens, hidden, vocab):
    """Liger's fused linear cross-entropy splits the tokens into chunks so that one chunk's
    logits are about the size of the hidden states (liger_kernel/ops/fused_linear_cross_entropy.py,
    fused_linear_cross_entropy_forward: inc_factor = cdiv(V, H), chunk_size =
    next_power_of_2(cdiv(BT, inc_factor)), chunks = cdiv(BT, chunk_size))."""
    inc = -(-vocab // hidden)
    chunk = 1 << max(0, math.ceil(math.log2(-(-tokens // inc))))
    return -(-tokens // chunk)


def arctic(r):
    """Whether the record ran ArcticTraining: its own stack in longctx (--stack arctic)."""
    return "arctictraining" in str(r.get("framework", "")).lower()


def torchtitan(r):
    """Whether the record ran torchtitan's trainer: its own stack in longctx (--stack torchtitan)."""
    return str(r.get("framework", "")).lower().startswith("torchtitan")


def hf(r):
    """Whether the record ran transformers' modeling code under TRL's SFTTrainer, the Trainer or
    accelerate (FSDP2, torch context parallel or DeepSpeed across GPUs among them): the hf stack
    (--stack hf), which refuses, naming the option, what it does not model yet."""
    framework = str(r.get("framework", "")).lower()
    return not arctic(r) and any(w in framework for w in ("trl", "transformers", "accelerate"))


def stack_of(r):
    return "arctic" if arctic(r) else "torchtitan" if torchtitan(r) else "hf" if hf(r) else "longctx"


def degrees(r):
    """The record's sequence-parallel degrees: Ulysses' and context parallel's (the ring)."""
    p = r.get("parallelism") or {}
    return int(p.get("ulysses_sp_degree") or 1), int(p.get("context_parallel_degree") or 1)


def node_layout(r):
    """GPUs per node from the record's `gpu` text ("8 per node", "4 nodes"), else at most 8 to a
    node (every record's machine holds 8), and whether the layout was stated."""
    gpus, text = int(r["num_gpus"]), str(r.get("gpu", "")).lower()
    per = re.search(r"(\d+)\s*per node", text)
    nodes = re.search(r"(\d+)\s*nodes", text)
    if nodes and int(nodes.group(1)) > 0:
        return -(-gpus // int(nodes.group(1))), True
    if per:
        return min(gpus, int(per.group(1))), True
    one_node = gpus <= 8 and re.search(r"\bnode\b", text) is not None  # "an H100 node"
    return min(gpus, 8), gpus == 1 or "single" in text or one_node


def hf_knobs(r, knobs, loss):
    """transformers' step as the record ran it: its default attention (sdpa) unless it names
    flash attention, the Trainer's non-reentrant checkpointing (transformers 5's default) or,
    where the record names FSDP's, accelerate's fsdp_activation_checkpointing
    (--hf-checkpointing accelerate), the checkpoint offload its TrainingArguments ask for (5.17
    on), TRL's chunked loss where named, and across GPUs FSDP2 or DeepSpeed ZeRO-3 (--sharding
    zero3), Ulysses and context parallel (--ring)."""
    kernel = str(r.get("attention_kernel", "")).lower()
    ulysses, ring = degrees(r)
    out = {"stack": "hf", "attention": "flash_attention_2" if "flash" in kernel else "sdpa"}
    for k in ("sharding", "ulysses", "checkpoint", "offload_checkpoints", "offload_optimizer", "offload_params"):
        out[k] = knobs[k]
    out["ring"] = ring
    if knobs["checkpoint"] != "none":
        by_fsdp = "fsdp" in str((r.get("activation_checkpointing") or {}).get("granularity", "")).lower()
        out["hf_checkpointing"] = "accelerate" if by_fsdp else "non-reentrant"
    if "chunked_nll" in loss:
        out["hf_loss"] = "trl-chunked-nll"
    # A run that needed expandable segments to fit (TRL's guide) ran with them.
    if "expandable_segments" in str(r.get("fit_status", "")):
        out["expandable_segments"] = True
    return out


def configuration(r):
    """longctx's knobs for the record (the stack's options among them, as CLI flags), and the
    approximations it takes."""
    p, ac, opt = r.get("parallelism") or {}, r.get("activation_checkpointing") or {}, r.get("optimizer") or {}
    m = r["model_config"]
    ulysses, ring = degrees(r)
    local = -(-r["seq_len"] // (ulysses * ring))
    notes = []
    knobs = {
        "sharding": "zero3" if p.get("zero_stage") == 3 or "FSDP" in str(p.get("fsdp") or "") else "none",
        "ulysses": ulysses,
        "checkpoint": "full" if ac.get("enabled") else "none",
        "offload_checkpoints": bool(ac.get("offload_to_cpu")),
        "offload_optimizer": bool(opt.get("offloaded_to_cpu")),
        "offload_params": bool(r.get("param_offload_to_cpu")),
        "mlp_tiles": 1,
    }
    if r.get("tiled_mlp"):
        # DeepSpeed TiledMLP as ArcticTraining calls it: num_shards = ceil(local seqlen / hidden).
        knobs["mlp_tiles"] = max(1, -(-local // m["hidden"]))
    loss = str(r.get("loss") or "").lower()
    liger = "liger" in loss or "fused linear" in loss
    if arctic(r):
        # ArcticTraining's own step: the loss follows from its model type (Liger's chunks), and
        # its recipes run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
        # (projects/sequence-parallelism/README.md).
        kernel = str(r.get("attention_kernel", "")).lower()
        knobs["stack"] = "arctic"
        knobs["attention"] = "flash_attention_3" if "3" in kernel else "flash_attention_2"
        knobs["arctic_model"] = "liger" if liger else "huggingface"
        knobs["expandable_segments"] = True
        return knobs, *_dtype_gpu(r), notes
    if torchtitan(r):
        # torchtitan's trainer: FSDP2 across the GPUs, its activation_checkpoint mode (full,
        # selective every K, or selective per op), its context parallel, nothing else of longctx's knobs.
        granularity = str(ac.get("granularity", "")).lower()
        knobs = {"stack": "torchtitan", "sharding": knobs["sharding"], "checkpoint": knobs["checkpoint"], "ring": ring}
        if ac.get("enabled") and "selective op" in granularity:
            knobs["checkpoint"] = "op"
        return knobs, *_dtype_gpu(r), notes
    if hf(r):
        return hf_knobs(r, knobs, loss), *_dtype_gpu(r), notes
    knobs["ring"] = ring
    knobs["loss_tiles"] = 1
    if liger:
        knobs["loss_tiles"] = liger_loss_chunks(local, m["hidden"], m["vocab"])
    elif "chunk" in loss:
        notes.append("chunked loss planned untiled")
    if "gradient_checkpointing" in str(ac.get("granularity", "")) or "HF" in str(ac.get("granularity", "")):
        notes.append("HF checkpointing planned as longctx's per-layer checkpoint")
    return knobs, *_dtype_gpu(r), notes


def _stated(v):
    text = str(v or "").strip().lower()
    return text not in ("", "none", "no", "false", "not stated") and not text.startswith("not stated")


def unexpressed(r, stack):
    """What the record gives that its longctx configuration does not express: each field read
    and left out, in words. Nothing here changes the plan."""
    p, ac, opt = r.get("parallelism") or {}, r.get("activation_checkpointing") or {}, r.get("optimizer") or {}
    framework, loss = str(r.get("framework", "")), str(r.get("loss") or "")
    gpus = int(r["num_gpus"])
    ulysses, ring = degrees(r)
    out = []
    if _stated(r.get("packing")):
        out.append("packing (" + str(r["packing"]).split(" (")[0] + "): planned as one unpacked sample")
    elif str(r.get("packing", "")).lower().startswith("not stated"):
        out.append("packing not stated: planned unpacked")
    accumulation = re.search(r"grad(?:ient)? accumulation (\d+)", framework.lower())
    if accumulation:
        out.append(f"gradient accumulation {accumulation.group(1)}: one micro-batch planned")
    versions = re.findall(r"(transformers ?>?=?\s?[\d.]+|deepspeed ?>?=?[\d.]+|accelerate ?>?=?[\d.]+|torch [\w.]+|"
                          r"flash_attn [\d.]+)", framework, re.I)
    if versions:
        out.append("versions as run: " + ", ".join(versions))
    if "yarn" in framework.lower():
        out.append("YaRN rope scaling (no allocation of its own in the modelled code)")
    if stack != "torchtitan" and (not loss or "not stated" in loss.lower()):  # torchtitan's trainer has one loss
        out.append("loss not stated")
    if "kernels-community" in str(r.get("attention_kernel", "")):
        out.append("attention kernel " + r["attention_kernel"] + " (planned as flash_attention_2)")
    if r.get("liger_kernels") and stack != "arctic":
        out.append("Liger kernels")
    sharding = p.get("sharding_degree")
    if sharding and int(sharding) != gpus:
        out.append(f"sharding_degree {sharding} of {gpus} GPUs (ZeRO over all ranks planned)")
    replicas = int(p.get("data_parallel_replicas") or 1)
    if replicas > 1 and not (sharding and int(sharding) == gpus):
        out.append(f"{replicas} data-parallel replicas")
    if int(r.get("tokens_per_gpu") or 0) and int(r["tokens_per_gpu"]) != -(-r["seq_len"] // (ulysses * ring)):
        out.append(f"tokens_per_gpu {r['tokens_per_gpu']} (planned: seq_len / (ulysses x ring))")
    if gpus > 1 and not node_layout(r)[1]:
        out.append(f"node layout not stated ({node_layout(r)[0]} GPUs per node planned)")
    if "not stated" in str(r.get("gpu", "")).lower():
        out.append("GPU not stated (" + _dtype_gpu(r)[1] + " planned)")
    if opt.get("type") and "adam" not in str(opt["type"]).lower():
        out.append("optimizer " + str(opt["type"]))
    return out


def _dtype_gpu(r):
    dtype = "bf16" if "bf16" in str(r.get("dtype", "")).lower() else "fp32"
    gpu = "h200-141gb" if "H200" in str(r.get("gpu", "")) else "h100-80gb"
    return dtype, gpu


def published_bytes(r):
    if r.get("value_GiB") is not None:
        return int(r["value_GiB"] * GIB)
    if r.get("value_MiB") is not None:
        return int(r["value_MiB"] * (1 << 20))
    if r.get("value_GB") is not None:
        return int(r["value_GB"] * GIB)  # nvidia-smi reports MiB; "GB" in these notes is MiB / 1024
    return None


def held_to(r):
    """Which predicted figure the record's measurement is: allocated, reserved or nvidia-smi."""
    how = str(r.get("measured", "")).lower()
    # A PyTorch memory profile (torch.cuda.memory._record_memory_history, or the profiler's
    # memory timeline) draws the tensors alive, what the caching allocator has handed out.
    if "max_memory_allocated" in how or "max allocated" in how or "memory profile" in how:
        return "allocated"
    if "max_memory_reserved" in how or "reserved" in how:
        return "reserved"
    return "nvidia-smi"


def plan_json(cli, config_path, r, knobs, dtype, gpu, budget):
    gpus = int(r["num_gpus"])
    cmd = [cli, "plan", "--model", config_path, "--gpus", str(gpus), "--gpus-per-node", str(node_layout(r)[0]),
           "--gpu", gpu, "--seq", str(r["seq_len"]), "--dtype", dtype, "--no-search", "--json",
           "--micro-batch", str(int(r.get("micro_batch") or 1)), "--host-mem", "1000TiB"]
    if budget:
        cmd += ["--budget", budget]
    for k, v in knobs.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            cmd.append(flag)
        elif v is not False:
            cmd += [flag, str(v)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    try:
        j = json.loads(out.stdout)  # also written when the plan does not fit (exit 3)
    except json.JSONDecodeError:
        return None, out.stderr.strip()
    return j.get("prediction") or j["plan"]["prediction"], ""


def predict(r, cli):
    knobs, dtype, gpu, notes = configuration(r)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(model_dict(r), f)
        # A card of other memory than the preset's (torchtitan's 96 GB H100s): its size as the budget.
        budget = f"{r['gpu_memory_GiB']}GiB" if r.get("gpu_memory_GiB") else None
        pred, err = plan_json(cli, path, r, knobs, dtype, gpu, budget)
        if pred is not None and not pred["feasible"]:
            notes.append("does not fit the GPU in longctx's model")
        if pred is None:
            raise ValueError(f"--stack {knobs.get('stack', 'longctx')} refuses it: {err}")
    return knobs, dtype, gpu, notes, pred


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "longctx"))
    a = ap.parse_args()
    with open(a.records) as f:
        records = json.load(f)
    rows, errors, by_stack, left_out, refused = [], [], {}, {}, {}
    for r in records:
        if set(r["model_config"]) >= {"layers", "heads"}:
            left_out[r["id"]] = unexpressed(r, stack_of(r))
        published = published_bytes(r)
        missing = {"layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim", "vocab"} - set(r["model_config"])
        if missing:
            rows.append((r["id"], "not a training step (its model_config lacks " + ", ".join(sorted(missing)) + ")",
                         None, None, None, published, None))
            continue
        try:
            knobs, dtype, gpu, notes, pred = predict(r, a.cli)
        except ValueError as e:
            rows.append((r["id"], "not expressible: " + str(e), None, None, None, published, None))
            refused[stack_of(r)] = refused.get(stack_of(r), 0) + 1
            continue
        allocated = pred["peak_device_bytes"]
        reserved = pred.get("peak_reserved_bytes")
        smi = pred.get("peak_nvidia_smi_bytes")
        kind = held_to(r)
        shown = {"allocated": allocated, "reserved": reserved, "nvidia-smi": smi}[kind]
        notes.append("held to " + kind)
        err = (shown - published) / published if published else None
        if err is not None:
            errors.append(err)
            by_stack.setdefault(knobs.get("stack", "longctx"), []).append(err)
        shown_knobs = [k if v is True else f"{k}={v}" for k, v in knobs.items()
                       if v is not False and v != "none" and (v is True or v != 1) and k != "expandable_segments"]
        cfg = f"{r['num_gpus']}x {gpu} {dtype} " + " ".join(shown_knobs)
        rows.append((r["id"], cfg + ("; " + "; ".join(notes) if notes else ""), allocated, reserved, smi, published, err))
    fmt = lambda b: "-" if b is None else f"{b / GIB:.2f}"
    if a.markdown:
        print("| record | longctx configuration | allocated GiB | reserved GiB | nvidia-smi GiB | published GiB | error |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
    for rid, cfg, al, re_, smi, pub, err in rows:
        e = "-" if err is None else f"{100 * err:+.1f}%"
        if a.markdown:
            print(f"| {rid} | {cfg} | {fmt(al)} | {fmt(re_)} | {fmt(smi)} | {fmt(pub)} | {e} |")
        else:
            print(f"{rid:50s} {fmt(al):>8} {fmt(re_):>8} {fmt(smi):>8} {fmt(pub):>8} {e:>8}  {cfg}")
    print("\nWhat each record gives that its configuration does not express:")
    for rid, fields in left_out.items():
        print(f"- {rid}: " + ("; ".join(fields) if fields else "nothing"))
    def summary(what, errs):
        return (f"{len(errs)} {what}: median error {100 * statistics.median(errs):+.1f}%, median |error| "
                f"{100 * statistics.median(map(abs, errs)):.1f}%, worst {100 * max(errs, key=abs):+.1f}%")
    if errors:
        print("\n" + summary("records", errors))
        for stack, errs in sorted(by_stack.items()):
            print(summary(f"records planned with --stack {stack}", errs))
    for stack, count in sorted(refused.items()):
        print(f"{count} records refused by --stack {stack} (not expressible: the refusal is in their row)")


if __name__ == "__main__":
    sys.exit(main())
