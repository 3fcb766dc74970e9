"""`--stack torchtitan` held to torchtitan itself: its Llama 3 model (torchtitan 0.2.2,
models/llama3) built at tiny odd shapes, trained on the CPU for two steps as its trainer's
forward_backward_step runs one (the model, components/loss.py's cross_entropy_loss over the
token count, `del pred`, backward; torch's fused AdamW, torchtitan's default implementation),
the second under the PyTorch profiler (profile_memory=True, one thread), with each of its
activation checkpointing modes applied by its own apply_ac, alone in fp32 or sharded by its own
apply_fsdp (FSDP2, param_dtype fp32 or bf16, reduce_dtype fp32) across 2 to 4 ranks. The peak
and every phase must be within 1% of the prediction. One more case per run is drawn from a seed
(LONGCTX_VALIDATION_SEED, else a fresh one each run, printed).

The sharded cases run rank 0 of a fake process group (torch.testing's FakeStore and "fake"
backend: collectives that allocate nothing), which is what FSDP2 allocates itself, as under
NCCL; Gloo's own staging copies are freed on its worker thread, where the profiler does not
see them go, and are not in the plan (footprint/fsdp2.h)."""
import os
import random

import pytest

import longctx
from conftest import drawn_seed, profile_second_step_of, assert_phases_within, strip_cpu_gemm_scratch
from cpu_ring import cpu_ring_attention, fake_ranks, most_of_any_rank

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
model_module = pytest.importorskip("torchtitan.models.llama3.model.model")
args_module = pytest.importorskip("torchtitan.models.llama3.model.args")
ac_module = pytest.importorskip("torchtitan.distributed.activation_checkpoint")
loss_module = pytest.importorskip("torchtitan.components.loss")
job_config = pytest.importorskip("torchtitan.config.job_config")
parallelize = pytest.importorskip("torchtitan.models.llama3.infra.parallelize")
context_parallel = pytest.importorskip("torchtitan.distributed.context_parallel")
qwen3_model = pytest.importorskip("torchtitan.models.qwen3.model.model")
qwen3_args = pytest.importorskip("torchtitan.models.qwen3.model.args")
qwen3_parallelize = pytest.importorskip("torchtitan.models.qwen3.infra.parallelize")


def model_args(dim, layers, heads, kv_heads, vocab, multiple_of, seq):
    return args_module.TransformerModelArgs(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads,
                                            vocab_size=vocab, multiple_of=multiple_of, max_seq_len=seq)


def qwen3_model_args(dim, layers, heads, kv_heads, head_dim, hidden, vocab, seq, tied):
    return qwen3_args.Qwen3ModelArgs(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads, head_dim=head_dim,
                                     hidden_dim=hidden, vocab_size=vocab, max_seq_len=seq, qk_norm=True,
                                     enable_weight_tying=tied)


def hf_config(args, model):
    """The same shapes as a transformers config, which is what longctx reads."""
    if isinstance(args, qwen3_args.Qwen3ModelArgs):
        return transformers.Qwen3Config(hidden_size=args.dim, num_hidden_layers=args.n_layers,
                                        num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
                                        head_dim=args.head_dim, intermediate_size=args.hidden_dim,
                                        vocab_size=args.vocab_size, tie_word_embeddings=args.enable_weight_tying)
    return transformers.LlamaConfig(hidden_size=args.dim, num_hidden_layers=args.n_layers,
                                    num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
                                    intermediate_size=model.layers["0"].feed_forward.w1.weight.shape[0],
                                    vocab_size=args.vocab_size, tie_word_embeddings=False)


def profile_second_step(args, batch, ac, trace_path, world=1, dtype="fp32", cp=1, cpu_handlers=None):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    qwen3 = isinstance(args, qwen3_args.Qwen3ModelArgs)
    model = qwen3_model.Qwen3Model(args) if qwen3 else model_module.Transformer(args)
    with torch.no_grad():
        model.init_weights()
    fsdp_mesh = cp_mesh = None
    if world > 1:
        # parallel_dims.py: FSDP2 over dp_shard x cp flattened, context parallel over cp.
        if cp == 1:
            fsdp_mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world,))
        else:
            mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world // cp, cp), mesh_dim_names=("dp_shard", "cp"))
            fsdp_mesh, cp_mesh = mesh["dp_shard", "cp"]._flatten("dp_shard_cp"), mesh["cp"]
    # parallelize_llama's order: context parallel, activation checkpointing, then FSDP.
    if cp_mesh is not None:
        context_parallel.apply_cp_to_attention_module([block.attention.inner_attention for block in model.layers.values()],
                                                      cp_mesh, "sdpa")
        from torch.distributed.tensor import DTensor
        DTensor._op_dispatcher._custom_op_handlers = {**DTensor._op_dispatcher._custom_op_handlers, **cpu_handlers}
    if ac != "none":
        # A torchtitan run builds its model once; its layer counter is module state.
        ac_module._layer_sac_count = 0
        mode, option = ("full", "2") if ac == "full" else ("selective", ac.split(":")[1])
        # Per-op selective checkpointing keeps the outputs of the ops on the model's own save
        # list, which its parallelize function passes to apply_ac.
        save_list = (qwen3_parallelize if qwen3 else parallelize)._op_sac_save_list
        ac_module.apply_ac(model, job_config.ActivationCheckpoint(mode=mode, selective_ac_option=option),
                           op_sac_save_list=save_list)
    if world > 1:
        # qwen3's parallelize applies llama4's apply_fsdp, which for a dense model wraps as llama3's does.
        (qwen3_parallelize if qwen3 else parallelize).apply_fsdp(model, fsdp_mesh, param_dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype],
                               reduce_dtype=torch.float32, pp_enabled=False)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, foreach=False)

    def forward_backward(inputs, labels):
        # train.py forward_backward_step: post_dataloading_process shards the batch under
        # context parallel; its inputs, labels and extra_kwargs go when it returns.
        extra_kwargs = {}
        if cp_mesh is not None:
            inputs, labels, extra_kwargs = context_parallel.prepare_context_parallel_input(
                inputs, labels, extra_kwargs, cp_mesh, torch.device("cpu"), "headtail")
        pred = model(inputs, **extra_kwargs)
        loss = loss_module.cross_entropy_loss(pred, labels) / labels.numel()
        del pred
        loss.backward()
        return loss

    def step():
        # Each step's batch is new, as torchtitan's train_step takes it from the data loader,
        # and held until the step returns.
        ids = torch.randint(0, args.vocab_size, (batch, args.max_seq_len))
        labels = torch.randint(0, args.vocab_size, (batch, args.max_seq_len))
        loss = forward_backward(ids, labels)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


    profile_second_step_of(step, trace_path)
    return model


def check(tmp_path, args, batch, ac, world=1, dtype="fp32", cp=1):
    knobs = {"micro_batch": batch, "sharding": "zero3" if world > 1 else "none"}
    if ac != "none":
        knobs["checkpoint"] = "op" if ac == "selective:op" else ac.replace("selective:", "every:")
    if cp > 1:
        knobs.update(ring=cp, ring_exchange="allgather")
    comparisons = []
    for rank in range(cp):  # every position in the ring (the ranks of one dp_shard group)
        trace = tmp_path / f"profile.{rank}.json"
        with fake_ranks(world, rank), cpu_ring_attention() as handlers:
            model = profile_second_step(args, batch, ac, trace, world, dtype, cp, handlers)
        if dtype == "bf16":
            print(f"CPU GEMM scratch set aside: up to {strip_cpu_gemm_scratch(trace)} bytes")
        plan = longctx.plan(hf_config(args, model), gpus=world, gpu="cpu", seq=args.max_seq_len, no_search=True,
                            techniques="checkpoint,zero3,ring", stack="torchtitan", dtype=dtype, **knobs)
        comparisons.append(longctx.compare(plan, trace))
    if cp == 1:
        assert_phases_within(comparisons[0])
        return
    # The plan holds the ring temporaries of the rank that holds the most, the last included,
    # and the other ranks' copy of the ring's output (footprint/torchtitan.h).
    assert_phases_within(most_of_any_rank(comparisons))


CASES = [
    # dim, layers, heads, kv heads, vocab, multiple_of, seq, micro-batch, activation checkpointing
    (64, 2, 4, 2, 512, 16, 256, 1, "none"),
    (64, 2, 4, 4, 512, 16, 192, 2, "none"),
    (96, 3, 6, 3, 320, 24, 160, 1, "full"),
    (64, 4, 4, 1, 384, 32, 128, 1, "selective:2"),
    (80, 3, 5, 5, 256, 16, 224, 1, "selective:3"),
    (64, 2, 8, 2, 448, 16, 96, 3, "full"),
    # A small vocabulary: the layers' tensors, not the logits, make most of the peak.
    (128, 3, 8, 2, 96, 32, 512, 1, "none"),
    (128, 2, 4, 2, 64, 32, 384, 2, "full"),
    # Per-op selective: every block's wq, wv, w1 and w2 outputs kept (the CPU's attention
    # kernel is not on the save list).
    (64, 2, 4, 2, 512, 16, 256, 1, "selective:op"),
    (96, 3, 6, 3, 320, 24, 160, 2, "selective:op"),
    (128, 3, 8, 2, 96, 32, 512, 1, "selective:op"),
]


@pytest.mark.parametrize("dim,layers,heads,kv,vocab,multiple_of,seq,batch,ac", CASES,
                         ids=[f"d{d}-l{l}-h{h}kv{k}-{s}x{b}-{ac}" for d, l, h, k, _, _, s, b, ac in CASES])
def test_torchtitan_stack_matches_torchtitan(tmp_path, dim, layers, heads, kv, vocab, multiple_of, seq, batch, ac):
    check(tmp_path, model_args(dim, layers, heads, kv, vocab, multiple_of, seq), batch, ac)


# FSDP2 across ranks: world, param_dtype, and a shape whose rows do not all divide the world
# (FSDP2 pads each parameter's dim 0 to a multiple of it).
FSDP_CASES = [
    (2, "fp32", (64, 2, 4, 2, 512, 16, 256, 1, "none")),
    (2, "bf16", (64, 2, 4, 2, 512, 16, 256, 1, "full")),
    (3, "bf16", (96, 3, 6, 3, 320, 24, 160, 1, "selective:2")),
    (4, "bf16", (80, 2, 5, 5, 256, 16, 224, 2, "none")),
    (3, "fp32", (128, 2, 8, 2, 100, 32, 384, 1, "full")),
    (2, "bf16", (80, 3, 5, 5, 256, 16, 224, 1, "selective:op")),
]


@pytest.mark.parametrize("world,dtype,case", FSDP_CASES,
                         ids=[f"fsdp{w}-{dt}-d{c[0]}-l{c[1]}-{c[6]}x{c[7]}-{c[8]}" for w, dt, c in FSDP_CASES])
def test_torchtitan_stack_matches_torchtitan_under_fsdp2(tmp_path, world, dtype, case):
    dim, layers, heads, kv, vocab, multiple_of, seq, batch, ac = case
    check(tmp_path, model_args(dim, layers, heads, kv, vocab, multiple_of, seq), batch, ac, world, dtype)


# torchtitan's qwen3 model (q/k norms, its own head_dim, the rotate-half RoPE from rope_cache):
# dim, layers, heads, kv heads, head_dim, hidden, vocab, seq, micro-batch, checkpointing, tied,
# ranks, dtype.
QWEN3_CASES = [
    (64, 2, 4, 2, 24, 176, 512, 256, 1, "none", False, 1, "fp32"),
    (64, 3, 6, 3, 20, 160, 384, 192, 2, "full", True, 1, "fp32"),
    (96, 2, 4, 2, 32, 256, 320, 160, 1, "selective:2", False, 2, "bf16"),
    (64, 2, 4, 1, 24, 176, 256, 224, 1, "none", False, 3, "bf16"),
    (64, 2, 4, 2, 20, 160, 384, 192, 1, "selective:op", True, 1, "fp32"),
]


@pytest.mark.parametrize("case", QWEN3_CASES, ids=[f"qwen3-d{c[0]}-hd{c[4]}-{c[7]}x{c[8]}-{c[9]}-{'tied' if c[10] else 'untied'}-"
                                                   f"{c[11]}x{c[12]}" for c in QWEN3_CASES])
def test_torchtitan_stack_matches_torchtitans_qwen3(tmp_path, case):
    dim, layers, heads, kv, head_dim, hidden, vocab, seq, batch, ac, tied, world, dtype = case
    check(tmp_path, qwen3_model_args(dim, layers, heads, kv, head_dim, hidden, vocab, seq, tied), batch, ac, world, dtype)


# Context parallel (torch's ring attention, load balanced, k/v all-gathered) under FSDP2 over
# dp_shard x cp: ranks, cp degree, dtype, and a llama3 case (heads of one to three key/value
# groups; sequences divisible by 2 x cp).
CP_CASES = [
    (2, 2, "fp32", (64, 2, 4, 2, 512, 16, 256, 1, "none")),
    (2, 2, "fp32", (64, 2, 4, 4, 384, 16, 192, 2, "full")),
    (3, 3, "fp32", (96, 3, 6, 3, 320, 24, 288, 1, "selective:2")),
    (4, 2, "fp32", (80, 2, 5, 5, 256, 16, 224, 2, "none")),
    (4, 4, "fp32", (64, 2, 4, 1, 448, 16, 256, 1, "full")),
    (2, 2, "bf16", (64, 2, 4, 2, 512, 16, 256, 1, "full")),
    (4, 2, "bf16", (96, 3, 6, 2, 320, 24, 192, 2, "selective:3")),
    (3, 3, "bf16", (128, 2, 8, 2, 96, 32, 384, 1, "none")),
    # One head: the ring's output transposed is contiguous already, and wo reads it uncopied.
    (2, 2, "bf16", (64, 3, 1, 1, 320, 16, 192, 1, "none")),
    # A wide output over a narrow model (a drawn shape, 2.5% under before): the peak is the
    # output group's reduce, where the CPU's cat casts each bf16 gradient into the fp32 input
    # through a temporary (footprint/fsdp2.h, reduce_copy_in_cast_bytes).
    (4, 2, "bf16", (24, 4, 3, 1, 576, 16, 20, 1, "selective:4")),
]


@pytest.mark.parametrize("world,cp,dtype,case", CP_CASES,
                         ids=[f"cp{c}of{w}-{dt}-d{k[0]}-h{k[2]}kv{k[3]}-{k[6]}x{k[7]}-{k[8]}" for w, c, dt, k in CP_CASES])
def test_torchtitan_stack_matches_torchtitan_under_context_parallel(tmp_path, world, cp, dtype, case):
    dim, layers, heads, kv, vocab, multiple_of, seq, batch, ac = case
    check(tmp_path, model_args(dim, layers, heads, kv, vocab, multiple_of, seq), batch, ac, world, dtype, cp)


def drawn_case(seed):
    rng = random.Random(seed)
    kv = rng.choice([1, 2, 3])
    heads = kv * rng.choice([1, 2, 3])
    dim = heads * 2 * rng.randint(2, 8)
    layers = rng.randint(1, 4)
    ac = rng.choice(["none", "full", "selective:op"] + [f"selective:{k}" for k in range(2, layers + 1)])
    return (dim, layers, heads, kv, 64 * rng.randint(2, 10), 8 * rng.randint(1, 4), 32 * rng.randint(2, 8),
            rng.choice([1, 1, 2, 3]), ac)


def test_torchtitan_stack_on_a_drawn_shape(tmp_path):
    seed = drawn_seed()
    case = drawn_case(seed)
    rng = random.Random(seed + 1)
    world = rng.choice([1, 2, 3, 4])
    dtype = "fp32" if world == 1 else rng.choice(["fp32", "bf16"])
    dim, layers, heads, kv, vocab, multiple_of, seq, batch, ac = case
    if rng.random() < 0.5:  # torchtitan's qwen3 model: its own head_dim and hidden size, tied on one rank
        head_dim, hidden, tied = 4 * rng.randint(2, 8), 8 * rng.randint(8, 32), world == 1 and rng.random() < 0.5
        print(f"seed {seed}: qwen3 dim {dim}, layers {layers}, heads {heads}/{kv} of {head_dim}, hidden {hidden}, "
              f"vocab {vocab}, seq {seq} x {batch}, {ac}, tied {tied}; {world} rank(s), {dtype}")
        args = qwen3_model_args(dim, layers, heads, kv, head_dim, hidden, vocab, seq, tied)
        check(tmp_path, args, batch, ac, world, dtype)
        return
    # Context parallel over some of the ranks (not with per-op selective checkpointing), the
    # sequence a multiple of 2 x cp.
    cp = 1
    if world > 1 and ac != "selective:op" and rng.random() < 0.5:
        cp = rng.choice([c for c in range(2, world + 1) if world % c == 0])
        seq = 2 * cp * rng.randint(3, 24)
    print(f"seed {seed}: llama3 dim, layers, heads, kv heads, vocab, multiple_of, micro-batch, ac = "
          f"{(dim, layers, heads, kv, vocab, multiple_of, batch, ac)}, seq {seq}; {world} rank(s), {dtype}, cp {cp}")
    check(tmp_path, model_args(dim, layers, heads, kv, vocab, multiple_of, seq), batch, ac, world, dtype, cp)
