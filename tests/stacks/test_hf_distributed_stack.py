"""`--stack hf` across GPUs held to the libraries themselves: a transformers model (4.57.1)
patched by TRL 1.14.2's own `_patch_chunked_ce_lm_head` (SFTTrainer's `loss_type="chunked_nll"`),
checkpointed by transformers' `gradient_checkpointing_enable` (the Trainer's) or by accelerate's
own `fsdp2_apply_ac` (its fsdp_activation_checkpointing), sharded by
accelerate 1.15.0's own `fsdp2_prepare_model` (FSDP2, its mixed precision) with its context
parallel attached by its own `Accelerator._prepare_cp` (torch's ring attention, k/v
all-gathered, load balanced), each step's batch prepared by the Trainer's own
`_prepare_context_parallel_inputs` and sharded by accelerate's `maybe_context_parallel`
(torch's `context_parallel`), then the Trainer's step: TRL's loss, backward, torch's fused
AdamW on the shards. Two steps on the CPU, the second under the PyTorch profiler
(profile_memory=True, one thread), on every rank of one context-parallel group of a fake
process group (collectives that allocate nothing, as under NCCL: footprint/fsdp2.h). The peak
and every phase, as the most any rank holds, must be within 1% of the plan (the ring's
temporaries of the rank that holds the most: footprint/torchtitan.h). One more case per run is
drawn from a seed (LONGCTX_VALIDATION_SEED, else a fresh one each run, printed).

accelerate's `Accelerator` itself refuses context parallel on a CPU (its state is MULTI_CPU,
and `ParallelismConfig._validate_accelerator` wants FSDP2), so its functions are called with a
stand-in holding what they read: the real FSDP plugin, device mesh and parallelism config."""
import contextlib
import functools
import os
import random
import types

import pytest

import longctx
from conftest import drawn_seed, profile_second_step_of, assert_phases_within, strip_cpu_gemm_scratch
from cpu_ring import cpu_ring_attention, fake_ranks, most_of_any_rank

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")
fsdp_utils = pytest.importorskip("accelerate.utils.fsdp_utils")
sft_trainer = pytest.importorskip("trl.trainer.sft_trainer")


def make_config(arch, **shape):
    kw = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=512, attn_implementation="sdpa")
    kw.update(shape)
    return {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config}[arch](**kw)


@contextlib.contextmanager
def accelerate_ranks(world, rank):
    """Rank `rank` of a fake process group as `accelerate launch` starts it (the environment
    its state reads), its state made anew for each case and dropped after."""
    env = {"WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29511"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with fake_ranks(world, rank):
            accelerate.PartialState._reset_state()
            accelerate.PartialState(cpu=True)
            yield
    finally:
        accelerate.PartialState._reset_state()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class TrainerStandIn:
    """What the Trainer's own context-parallel preparation reads of its trainer."""
    _prepare_context_parallel_inputs = transformers.Trainer._prepare_context_parallel_inputs
    _is_attention_mask_causal = transformers.Trainer._is_attention_mask_causal

    def __init__(self, accelerator):
        self.accelerator = accelerator


def prepare(model, world, cp, dtype, accelerate_ac=False):
    """accelerate's preparation of the model (Accelerator.prepare: _prepare_cp, then
    _prepare_fsdp2's set_auto_wrap_policy, fsdp2_apply_ac where its plugin checkpoints
    (`accelerate_ac`: fsdp_activation_checkpointing) and fsdp2_prepare_model) on a stand-in
    holding its plugin, mesh and parallelism config; returns the stand-in."""
    parallelism = accelerate.parallelism_config.ParallelismConfig(dp_shard_size=world // cp, cp_size=cp)
    plugin = accelerate.utils.FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                             activation_checkpointing=accelerate_ac)
    mixed_precision = {"fp32": "no", "bf16": "bf16"}[dtype]
    if mixed_precision != "no":
        plugin.set_mixed_precision(mixed_precision)
    stand_in = types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin), parallelism_config=parallelism,
                                     torch_device_mesh=parallelism.build_device_mesh("cpu"),
                                     mixed_precision=mixed_precision, is_main_process=True, device=torch.device("cpu"))
    stand_in.maybe_context_parallel = functools.partial(accelerate.Accelerator.maybe_context_parallel, stand_in)
    if cp > 1:
        accelerate.Accelerator._prepare_cp(stand_in, model)
    plugin.set_auto_wrap_policy(model)
    if accelerate_ac:
        model = fsdp_utils.fsdp2_apply_ac(stand_in, model)
    model = fsdp_utils.fsdp2_prepare_model(stand_in, model)
    if mixed_precision != "no":
        # prepare_model under native amp: the forward under torch.autocast in bf16 (under FSDP
        # as on one device: utils/modeling.py get_mixed_precision_context_manager) and its
        # outputs cast to fp32 (convert_outputs_to_fp32: TRL's loss returns no logits).
        autocast = torch.autocast(device_type="cpu", dtype=torch.bfloat16)
        forward = autocast(model.forward.__func__)
        model.forward = types.MethodType(accelerate.utils.convert_outputs_to_fp32(forward), model)
    return stand_in, model


def profile_second_step(config, seq, batch, checkpointing, world, cp, dtype, trace_path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config.max_position_embeddings = max(seq, 64)
    model = transformers.AutoModelForCausalLM.from_config(config)
    # The Trainer's _inner_training_loop enables checkpointing, and SFTTrainer.__init__ patches
    # the loss, before accelerate prepares the model.
    # "accelerate": its fsdp_activation_checkpointing instead (the Trainer refuses both).
    if checkpointing in ("non-reentrant", "reentrant"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})
    sft_trainer._patch_chunked_ce_lm_head(model, chunk_size=sft_trainer._CHUNKED_LM_HEAD_CHUNK_SIZE)
    stand_in, model = prepare(model, world, cp, dtype, accelerate_ac=checkpointing == "accelerate")
    trainer = TrainerStandIn(stand_in)
    model.train()
    # adamw_torch_fused, the Trainer's default, created after the wrapping (on the shards).
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)

    def step():
        # The data loader's batch, held by the training loop until the step returns; the
        # Trainer's training_step adds position_ids and shift_labels to it and shards it.
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        inputs = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
        cp_context, inputs = trainer._prepare_context_parallel_inputs(model, inputs)
        with cp_context():
            # SFTTrainer.compute_loss: use_cache off, the model's loss; the step drops the rest,
            # and training_step returns the loss detached (its graph goes before the optimizer).
            inputs["use_cache"] = False
            model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    profile_second_step_of(step, trace_path)


def check(tmp_path, config, seq, batch, checkpointing, world, cp, dtype="fp32"):
    knobs = {"micro_batch": batch, "sharding": "zero3", "ring": cp, "ring_exchange": "allgather"}
    if checkpointing != "none":
        knobs.update(checkpoint="full", hf_checkpointing=checkpointing)
    comparisons = []
    for rank in range(cp):  # every position in the ring (the ranks of one dp_shard group)
        trace = tmp_path / f"profile.{rank}.json"
        with accelerate_ranks(world, rank), cpu_ring_attention():
            profile_second_step(config, seq, batch, checkpointing, world, cp, dtype, trace)
        if dtype == "bf16":
            print(f"CPU GEMM scratch set aside: up to {strip_cpu_gemm_scratch(trace)} bytes")
        plan = longctx.plan(config, gpus=world, gpu="cpu", seq=seq, no_search=True, techniques="checkpoint,zero3,ring",
                            stack="hf", dtype=dtype, hf_loss="trl-chunked-nll", **knobs)
        comparisons.append(longctx.compare(plan, trace))
        rows = {p["phase"]: (p["predicted_bytes"], p["measured_bytes"]) for p in comparisons[-1]["phases"]}
        print(f"rank {rank}: peak {comparisons[-1]['predicted_peak_bytes']} predicted, "
              f"{comparisons[-1]['measured_peak_bytes']} measured; {rows}")
    assert_phases_within(most_of_any_rank(comparisons))


CASES = [
    # arch, ranks, cp, checkpointing, dtype, seq, micro-batch, shape beyond the defaults (GQA:
    # 4 heads over 2 key/value heads)
    ("llama", 2, 2, "none", "fp32", 256, 1, {}),
    ("llama", 4, 4, "non-reentrant", "fp32", 256, 1, {}),
    ("llama", 4, 2, "reentrant", "fp32", 192, 2, {"num_key_value_heads": 1}),
    # A tied table: one group with the final norm, unsharded all step.
    ("qwen3", 4, 2, "none", "fp32", 192, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    ("qwen3", 4, 4, "non-reentrant", "fp32", 320, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    # Two of TRL's chunks per rank: the second's lm_head gradient makes the sum the embedding's
    # joins in place (the one-chunk cases above make it with the embedding's: HfStep::tied_sum).
    ("qwen3", 2, 2, "none", "fp32", 600, 1, {"head_dim": 24, "tie_word_embeddings": True, "vocab_size": 2048,
                                             "hidden_size": 256}),
    # accelerate's fsdp_activation_checkpointing: checkpoint_wrapper inside each FSDP2 layer.
    ("llama", 4, 4, "accelerate", "fp32", 256, 1, {}),
    ("qwen3", 3, 3, "accelerate", "fp32", 60, 2, {"head_dim": 24, "tie_word_embeddings": True}),
]


def case_ids(cases):
    return [f"{a}-cp{c}of{w}-{ck}-{d}-{s}x{b}{'-tied' if sh.get('tie_word_embeddings') else ''}"
            for a, w, c, ck, d, s, b, sh in cases]


@pytest.mark.parametrize("arch,world,cp,checkpointing,dtype,seq,batch,shape", CASES, ids=case_ids(CASES))
def test_hf_stack_matches_accelerate_under_context_parallel(tmp_path, arch, world, cp, checkpointing, dtype, seq, batch,
                                                            shape):
    check(tmp_path, make_config(arch, **shape), seq, batch, checkpointing, world, cp, dtype)


# accelerate's bf16 mixed precision: the shards upcast to fp32, gathered in bf16, reduced in
# bf16 into fp32 gradients, the forward under autocast.
BF16_CASES = [
    ("llama", 2, 2, "none", "bf16", 256, 1, {}),
    ("llama", 4, 4, "non-reentrant", "bf16", 256, 1, {"num_hidden_layers": 3}),
    ("qwen3", 4, 2, "non-reentrant", "bf16", 192, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    ("qwen3", 4, 2, "accelerate", "bf16", 192, 1, {"head_dim": 24, "tie_word_embeddings": True}),
    # The last of two ring ranks attends half of k/v with all of its q at its second step: its
    # ring temporaries, the plan's, are the larger (footprint/torchtitan.h); its backward peak is
    # there at this length (rank 0 alone planned: 8.7% under).
    ("llama", 2, 2, "reentrant", "bf16", 2048, 1, {}),
    # One attention head: the ring's output needs no contiguous copy for o_proj (a drawn shape
    # found it, 1.1% over with the copy booked).
    ("llama", 3, 3, "none", "bf16", 240, 1, {"num_key_value_heads": 1, "num_attention_heads": 1, "hidden_size": 40,
                                             "head_dim": 28, "intermediate_size": 88, "num_hidden_layers": 3,
                                             "vocab_size": 320}),
    # Reentrant checkpointing's RNG states live as long as the graph (blocks/hf_layers.h).
    ("qwen3", 4, 2, "reentrant", "bf16", 96, 1, {"head_dim": 24, "tie_word_embeddings": True}),
]


@pytest.mark.parametrize("arch,world,cp,checkpointing,dtype,seq,batch,shape", BF16_CASES, ids=case_ids(BF16_CASES))
def test_hf_stack_matches_accelerate_under_context_parallel_in_bf16(tmp_path, arch, world, cp, checkpointing, dtype, seq,
                                                                    batch, shape):
    check(tmp_path, make_config(arch, **shape), seq, batch, checkpointing, world, cp, dtype)


def drawn_case(seed):
    rng = random.Random(seed)
    arch = rng.choice(["llama", "qwen3"])
    kv = rng.choice([1, 2, 3])
    heads = kv * rng.choice([1, 2, 3])
    shape = {"num_key_value_heads": kv, "num_attention_heads": heads, "hidden_size": 8 * rng.randint(4, 16),
             "head_dim": 4 * rng.randint(2, 8), "intermediate_size": 8 * rng.randint(8, 32),
             "num_hidden_layers": rng.randint(1, 3), "vocab_size": 64 * rng.randint(2, 10),
             "tie_word_embeddings": rng.random() < 0.5}
    # Two to four ranks: on three, FSDP2 pads the rows that do not divide, and on the CPU its
    # reduce's chunk_cat copies each such gradient padded (footprint/fsdp2.h).
    world = rng.choice([2, 3, 4])
    cp = rng.choice([c for c in range(2, world + 1) if world % c == 0])
    # The load balancer's 2 x cp chunks: TRL pads to a multiple of it (pad_to_multiple_of).
    seq = 2 * cp * rng.randint(4, 40)
    checkpointing = rng.choice(["none", "non-reentrant", "reentrant", "accelerate"])
    dtype = rng.choice(["fp32", "bf16"])
    return (arch, world, cp, checkpointing, dtype, seq, rng.choice([1, 1, 2]), shape)


def test_hf_stack_under_context_parallel_on_a_drawn_shape(tmp_path):
    seed = drawn_seed()
    arch, world, cp, checkpointing, dtype, seq, batch, shape = drawn_case(seed)
    print(f"seed {seed}: {arch}, cp {cp} of {world} ranks, {checkpointing}, {dtype}, seq {seq} x {batch}, {shape}")
    check(tmp_path, make_config(arch, **shape), seq, batch, checkpointing, world, cp, dtype)
