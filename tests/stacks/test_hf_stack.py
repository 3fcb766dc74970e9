"""`--stack hf` held to Hugging Face transformers itself: tiny models of odd shapes trained on
the CPU for two steps, the second under the PyTorch profiler (profile_memory=True, one
thread, fp32, torch AdamW), each attention implementation and checkpointing mode. The peak
and every phase (forward with the loss, backward, optimizer) must be within 1% of the
prediction, with `compare` adding back what existed before profiling began.

bf16 cases hold the casts (RMSNorm's fp32 copies, the loss's upcast). TRL cases patch the
model as SFTTrainer does for its chunked loss (TRL 1.14.2's own `_patch_chunked_ce_lm_head`). The fixed cases cover the shapes the modeling code branches on (GQA and not, head_dim other
than hidden/heads, tied embeddings, Qwen3's q/k norms, Qwen2's biases, Mistral); one more
case per run is drawn from a seed (LONGCTX_VALIDATION_SEED, else a fresh one each run, printed; its loss and dtype too), so every CI
run holds a shape nobody tuned against."""
import os
import random

import pytest

import longctx
from conftest import drawn_seed, profile_second_step_of, TOLERANCE, assert_phases_within, strip_cpu_gemm_scratch

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

def make_config(arch, attention, **shape):
    kw = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=512, attn_implementation=attention)
    kw.update(shape)
    configs = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
               "qwen3": transformers.Qwen3Config, "mistral": transformers.MistralConfig}
    return configs[arch](**kw)


def profile_second_step(config, seq, batch, checkpointing, mask, dtype, optimizer, loss, trace_path, use_cache=True):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config.max_position_embeddings = max(seq, 64)
    # What training scripts set to turn the model's k/v cache off (`model.config.use_cache = False`).
    config.use_cache = use_cache
    model = transformers.AutoModelForCausalLM.from_config(config).to(getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[dtype]))
    if checkpointing != "none":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})
    if loss == "trl-chunked-nll":
        # What SFTTrainer does to the model for loss_type="chunked_nll" (TRL 1.10 to 1.14.2).
        from trl.trainer.sft_trainer import _CHUNKED_LM_HEAD_CHUNK_SIZE, _patch_chunked_ce_lm_head
        _patch_chunked_ce_lm_head(model, chunk_size=_CHUNKED_LM_HEAD_CHUNK_SIZE)
    model.train()
    # The Trainer's `optim`: adamw_torch_fused (its default) or adamw_torch (torch's defaults).
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=optimizer == "adamw_torch_fused" or None)
    def step():
        # Each step's batch is new, as the Trainer's dataloader hands it over, and held until
        # the step returns: input_ids, labels as the collator copies them, and the
        # attention_mask the Trainer's tokenized batches carry (a bare loop often passes none).
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        inputs = {"input_ids": ids, "labels": ids.clone()}
        if mask:
            inputs["attention_mask"] = torch.ones_like(ids)
        # The output (and with TRL's loss its metrics' graph) is dropped before backward, as
        # the Trainer's compute_loss returns the loss alone.
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


    profile_second_step_of(step, trace_path)


def check(tmp_path, config, seq, checkpointing, mask=True, batch=1, dtype="fp32", optimizer="adamw_torch_fused",
          loss="transformers", use_cache=True):
    trace = tmp_path / "profile.json"
    profile_second_step(config, seq, batch, checkpointing, mask, dtype, optimizer, loss, trace, use_cache)
    if dtype == "bf16":
        print(f"CPU GEMM scratch set aside: up to {strip_cpu_gemm_scratch(trace)} bytes")
    knobs = {"micro_batch": batch} if checkpointing == "none" else {"micro_batch": batch, "checkpoint": "full"}
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=seq, no_search=True, techniques="checkpoint", stack="hf", dtype=dtype,
                        attention=config._attn_implementation,
                        hf_checkpointing=None if checkpointing == "none" else checkpointing, hf_attention_mask=mask,
                        hf_optimizer=optimizer, hf_loss=loss, hf_use_cache=use_cache, **knobs)
    assert_phases_within(longctx.compare(plan, trace))


CASES = [
    # arch, attention, checkpointing, attention_mask passed, seq, micro-batch, shape beyond the defaults
    ("llama", "sdpa", "none", True, 256, 1, {}),
    ("llama", "sdpa", "none", False, 128, 2, {}),
    ("llama", "sdpa", "non-reentrant", True, 256, 1, {}),
    ("llama", "sdpa", "non-reentrant", False, 256, 1, {}),
    ("llama", "sdpa", "reentrant", False, 192, 1, {}),
    ("llama", "eager", "none", True, 128, 1, {}),
    ("llama", "eager", "non-reentrant", False, 160, 1, {}),
    ("llama", "eager", "reentrant", True, 128, 1, {"num_key_value_heads": 4}),
    ("llama", "sdpa", "reentrant", True, 200, 1, {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3,
                                                   "head_dim": 20, "intermediate_size": 200, "num_hidden_layers": 3}),
    ("qwen3", "sdpa", "none", True, 256, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    ("qwen3", "eager", "reentrant", False, 96, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    ("qwen3", "eager", "reentrant", True, 64, 3, {"head_dim": 24, "tie_word_embeddings": True}),
    ("qwen2", "sdpa", "non-reentrant", True, 256, 1, {}),
    ("mistral", "sdpa", "none", False, 128, 1, {}),
    # One key/value head: repeat_kv is a stride-0 view, not a copy.
    ("mistral", "eager", "non-reentrant", False, 256, 1, {"num_key_value_heads": 1, "num_attention_heads": 3,
                                                         "hidden_size": 128, "head_dim": 8, "num_hidden_layers": 3}),
    # A micro-batch over one head: torch.matmul's batch fold copies q, and the stride-0 k and v.
    ("llama", "eager", "none", True, 256, 2, {"num_key_value_heads": 1}),
    # Unrepeated k and v without the cache's contiguous copies fold by copy too.
    ("qwen3", "eager", "non-reentrant", False, 224, 2, {"num_key_value_heads": 3, "num_attention_heads": 3, "head_dim": 24}),
    # A wide MLP in a checkpointed layer: the decoder layer's `_` keeps eager's weights alive through it.
    ("llama", "eager", "reentrant", False, 224, 1, {"num_key_value_heads": 1, "num_attention_heads": 1, "hidden_size": 48,
                                                   "head_dim": 12, "intermediate_size": 216, "num_hidden_layers": 3}),
]


@pytest.mark.parametrize("arch,attention,checkpointing,mask,seq,batch,shape", CASES,
                         ids=[f"{a}-{att}-{c}-{'mask' if m else 'nomask'}-{s}x{b}" for a, att, c, m, s, b, _ in CASES])
def test_hf_stack_matches_transformers(tmp_path, arch, attention, checkpointing, mask, seq, batch, shape):
    # Every other case with torch's plain AdamW: both optimizers are held.
    optimizer = "adamw_torch" if CASES.index((arch, attention, checkpointing, mask, seq, batch, shape)) % 2 else "adamw_torch_fused"
    check(tmp_path, make_config(arch, attention, **shape), seq, checkpointing, mask, batch, optimizer=optimizer)


# bf16 weights, as a pure-bf16 run keeps them (torch AdamW's moments in bf16 too).
BF16_CASES = [
    ("llama", "sdpa", "none", True, 256, 1, {}),
    ("llama", "eager", "non-reentrant", False, 128, 1, {}),
    ("qwen3", "sdpa", "reentrant", True, 128, 2, {"head_dim": 24, "tie_word_embeddings": True}),
]


@pytest.mark.parametrize("arch,attention,checkpointing,mask,seq,batch,shape", BF16_CASES,
                         ids=[f"{a}-{att}-{c}-{'mask' if m else 'nomask'}-{s}x{b}-bf16" for a, att, c, m, s, b, _ in BF16_CASES])
def test_hf_stack_matches_transformers_in_bf16(tmp_path, arch, attention, checkpointing, mask, seq, batch, shape):
    check(tmp_path, make_config(arch, attention, **shape), seq, checkpointing, mask, batch, "bf16")


# The model's cache off (`--hf-no-use-cache`, config.use_cache = False): no DynamicCache
# copies of each layer's k and v, and without an attention_mask sdpa gets the packed-sequence
# check's boolean mask although no layer is checkpointed; under checkpointing nothing changes.
USE_CACHE_OFF_CASES = [
    ("llama", "sdpa", "none", True, 256, 1, {}),
    ("llama", "sdpa", "none", False, 192, 2, {}),
    ("qwen3", "eager", "none", False, 128, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    ("mistral", "sdpa", "non-reentrant", False, 160, 1, {"num_key_value_heads": 1, "num_attention_heads": 3,
                                                         "hidden_size": 96, "head_dim": 16}),
]


@pytest.mark.parametrize("arch,attention,checkpointing,mask,seq,batch,shape", USE_CACHE_OFF_CASES,
                         ids=[f"{a}-{att}-{c}-{'mask' if m else 'nomask'}-{s}x{b}-nocache"
                              for a, att, c, m, s, b, _ in USE_CACHE_OFF_CASES])
def test_hf_stack_without_the_cache_matches_transformers(tmp_path, arch, attention, checkpointing, mask, seq, batch, shape):
    check(tmp_path, make_config(arch, attention, **shape), seq, checkpointing, mask, batch, use_cache=False)


# TRL SFTTrainer's chunked loss (`--hf-loss trl-chunked-nll`): lengths of one chunk of 256
# rows, two, and several with a short last one; a micro-batch of 2 (the shift copies), tied
# embeddings (the summed gradient waits for the embedding's), checkpointing, bf16.
TRL_CASES = [
    ("llama", "sdpa", "none", True, 200, 1, "fp32", {}),
    ("llama", "sdpa", "none", True, 400, 1, "fp32", {}),
    ("llama", "sdpa", "non-reentrant", True, 1100, 1, "fp32", {}),
    ("llama", "sdpa", "reentrant", False, 700, 1, "fp32", {}),
    ("llama", "sdpa", "none", False, 350, 2, "fp32", {"tie_word_embeddings": True}),
    ("llama", "sdpa", "none", True, 600, 1, "bf16", {}),
    ("qwen3", "sdpa", "non-reentrant", True, 520, 3, "fp32", {"head_dim": 24, "tie_word_embeddings": True}),
    # A wide table, so that lm_head's [V, h] gradients decide the backward's peak: one chunk's
    # view, tied, joined by the embedding's in a new sum; three chunks', untied, the second
    # making the sum (HfStep::tied_sum).
    ("llama", "eager", "none", True, 24, 1, "fp32", {"hidden_size": 512, "vocab_size": 4096, "num_hidden_layers": 1,
                                                     "tie_word_embeddings": True}),
    ("llama", "eager", "none", True, 600, 1, "fp32", {"hidden_size": 1024, "vocab_size": 4096, "num_hidden_layers": 1}),
]


@pytest.mark.parametrize("arch,attention,checkpointing,mask,seq,batch,dtype,shape", TRL_CASES,
                         ids=[f"{a}-{c}-{'mask' if m else 'nomask'}-{s}x{b}-{d}" for a, _, c, m, s, b, d, _ in TRL_CASES])
def test_trl_chunked_loss_matches_trl(tmp_path, arch, attention, checkpointing, mask, seq, batch, dtype, shape):
    pytest.importorskip("trl")
    check(tmp_path, make_config(arch, attention, **shape), seq, checkpointing, mask, batch, dtype, loss="trl-chunked-nll")


def drawn_case(seed):
    rng = random.Random(seed)
    arch = rng.choice(["llama", "qwen2", "qwen3", "mistral"])
    kv = rng.choice([1, 2, 3])
    heads = kv * rng.choice([1, 2, 3])
    shape = {"num_key_value_heads": kv, "num_attention_heads": heads, "hidden_size": 8 * rng.randint(4, 16),
             "head_dim": 4 * rng.randint(2, 8), "intermediate_size": 8 * rng.randint(8, 32),
             "num_hidden_layers": rng.randint(1, 3), "vocab_size": 64 * rng.randint(2, 10)}
    if arch in ("llama", "qwen3"):
        shape["tie_word_embeddings"] = rng.random() < 0.5
    return (arch, rng.choice(["sdpa", "eager"]), rng.choice(["none", "non-reentrant", "reentrant"]), rng.random() < 0.5,
            32 * rng.randint(2, 8), rng.choice([1, 1, 2, 3]), shape)


def test_hf_stack_on_a_drawn_shape(tmp_path):
    seed = drawn_seed()
    arch, attention, checkpointing, mask, seq, batch, shape = drawn_case(seed)
    print(f"seed {seed}: {arch} {attention} {checkpointing} attention_mask {mask} seq {seq} x {batch} {shape}")
    # Lengths drawn up to 256 give TRL's loss one chunk; a second draw of the loss spans up to four.
    pick = random.Random(seed)
    optimizer = pick.choice(["adamw_torch_fused", "adamw_torch"])
    loss = pick.choice(["transformers", "trl-chunked-nll"])
    if loss == "trl-chunked-nll":
        seq = pick.randint(2, 1024)
    # fp32, or bf16 weights (a pure-bf16 run, as the bf16 cases above).
    dtype = pick.choice(["fp32", "bf16"])
    use_cache = pick.random() < 0.7  # the config's default, or turned off as training scripts do
    print(f"loss {loss}, seq {seq}, {optimizer}, {dtype}, use_cache {use_cache}")
    check(tmp_path, make_config(arch, attention, **shape), seq, checkpointing, mask, batch, dtype, optimizer=optimizer,
          loss=loss, use_cache=use_cache)


def test_lm_heads_weight_gradient_is_summed_out_of_place():
    """What HfStep::tied_sum books, in torch itself: `x @ w.t()` hands w's AccumulateGrad a
    view (MmBackward0's column-major gradient seen through TBackward0) that its input buffer
    never adds to in place, so a second gradient of w makes a new sum; that sum, a tensor of
    its own, takes the third in place; and the parameter's .grad is what the buffer held."""
    V, h, n = 96, 32, 8

    def backward_allocations(uses):
        w = torch.nn.Parameter(torch.randn(V, h))
        tokens = torch.randint(0, V, (n,))
        x = torch.randn(n, h)
        loss = sum(((x @ w.t()).logsumexp(-1).sum() for _ in range(uses)), torch.nn.functional.embedding(tokens, w).sum())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            loss.backward()
        sums = [e for e in prof.events() if e.name == "aten::add" and e.cpu_memory_usage == V * h * 4]
        in_place = [e for e in prof.events() if e.name == "aten::add_"]
        assert w.grad.is_contiguous()
        return len(sums), len(in_place)

    # One lm_head use: the embedding's gradient and the view meet in a new sum.
    assert backward_allocations(1) == (1, 0)
    # Two: the second lm_head gradient makes the sum, the embedding's goes into it in place.
    assert backward_allocations(2) == (1, 1)


class TokenizedBatches(torch.utils.data.Dataset):
    """What a tokenized dataset hands the Trainer: ids, an all-ones attention_mask, labels."""

    def __init__(self, vocab, seq, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


@pytest.mark.parametrize("checkpointing", ["none", "non-reentrant", "reentrant"])
def test_the_trainers_step_is_the_one_predicted(tmp_path, checkpointing):
    """transformers.Trainer with its defaults (adamw_torch_fused from torch 2.8), measured by
    longctx's own callback (longctx.hf.MemoryReportCallback): the step the hf stack models
    is the Trainer's, phase by phase."""
    from longctx.hf import MemoryReportCallback

    seq = 256
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = make_config("llama", "sdpa", max_position_embeddings=seq)
    model = transformers.LlamaForCausalLM(config)
    knobs = {} if checkpointing == "none" else {"checkpoint": "full"}
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=seq, no_search=True, techniques="checkpoint", stack="hf",
                        hf_checkpointing=None if checkpointing == "none" else checkpointing, **knobs)
    callback = MemoryReportCallback(plan, report_to=lambda text: None)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=3, report_to=[], use_cpu=True,
        save_strategy="no", logging_strategy="no", dataloader_num_workers=0, gradient_checkpointing=checkpointing != "none",
        gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"} if checkpointing != "none" else None)
    # The optimizer the plan predicts is the one the Trainer picks.
    assert transformers.training_args.OptimizerNames(args.optim).value == plan.data["train"]["stack"]["optimizer"]
    transformers.Trainer(model=model, args=args, train_dataset=TokenizedBatches(config.vocab_size, seq, 4),
                         callbacks=[callback]).train()
    rows = {r.phase: r for r in callback.rows}
    assert set(rows) == {"forward", "backward", "optimizer"}
    for phase, r in rows.items():
        assert abs(r.error) <= TOLERANCE, f"{phase}: {r.predicted_bytes} predicted, {r.measured_bytes} measured"
