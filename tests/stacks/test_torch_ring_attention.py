"""PyTorch's own ring attention (the context parallelism torchtitan and accelerate use:
torch.distributed.tensor.experimental._context_parallel._attention, _templated_ring_attention
and _templated_ring_attention_backward) held to longctx's footprint of it
(footprint/torch_ring_attention.h, through longctx._core): on the CPU, with its flash kernel
(_scaled_dot_product_flash_attention_for_cpu and its backward, one thread), one rank of a fake
process group of 2 to 4 (torch.testing's FakeStore and "fake" backend: collectives allocate
their outputs and move nothing, which is what a rank allocates under NCCL too), both rotate
methods, load balancing on and off, GQA and not, q/k/v laid out as torchtitan's transposed
views or contiguous. Each function runs under the PyTorch profiler (profile_memory=True): the
most it allocates at once beyond its inputs, and what it returns, must equal the footprint's
to the byte. bf16 is held in forward; its CPU backward's GEMM scratch inside the kernel is not
in the footprint (docs/stacks.md). Fixed cases, and more drawn from a seed
(LONGCTX_VALIDATION_SEED, else a fresh one each run, printed)."""
import json
import os
import random

import pytest

import longctx
from conftest import drawn_seed

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
cp = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")


def allocated_in(trace_path):
    """The most allocated at once in a profiled stretch, and what it left allocated."""
    events = json.load(open(trace_path))["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    live = peak = 0
    for e in memory:
        live += e["args"]["Bytes"]
        peak = max(peak, live)
    return peak, live


def measure(tmp_path, world, rank, rotate, load_balance, b, heads, kv_heads, local_seq, head_dim, dtype, transposed):
    torch.set_num_threads(1)
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=rank, world_size=world)
    try:
        cp._cp_options.enable_load_balance = load_balance
        cp._cp_options.rotate_method = {"allgather": cp._RotateMethod.ALL_GATHER, "alltoall": cp._RotateMethod.ALL_TO_ALL}[rotate]
        dt = getattr(torch, dtype)
        torch.manual_seed(0)

        def tensor(h):
            if transposed:  # torchtitan's: [b, S, heads, d] viewed as [b, heads, S, d]
                return torch.randn(b, local_seq, h, head_dim, dtype=dt).transpose(1, 2)
            return torch.randn(b, h, local_seq, head_dim, dtype=dt)

        q, k, v = tensor(heads), tensor(kv_heads), tensor(kv_heads)
        group = dist.group.WORLD
        aten = torch.ops.aten
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            out, lse = cp._templated_ring_attention(group, 2, aten._scaled_dot_product_flash_attention_for_cpu,
                                                    query=q, key=k, value=v, is_causal=True)[:2]
        prof.export_chrome_trace(str(tmp_path / "forward.json"))
        grad_out = torch.ones_like(out)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            grads = cp._templated_ring_attention_backward(
                group, 2, aten._scaled_dot_product_flash_attention_for_cpu_backward.default, grad_out=grad_out,
                grad_out_name="grad_out", query=q, key=k, value=v, out=out, logsumexp=lse, is_causal=True, dropout_p=0.0)
        prof.export_chrome_trace(str(tmp_path / "backward.json"))
        # What was allocated under the profiler is freed under it too: the profiler's running
        # Total Allocated would otherwise keep these bytes for the rest of the process, and
        # offset the traces of the stack tests that run after this one in it.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True):
            del out, lse, grads
        return allocated_in(tmp_path / "forward.json"), allocated_in(tmp_path / "backward.json")
    finally:
        cp._cp_options.enable_load_balance = True
        cp._cp_options.rotate_method = cp._RotateMethod.ALL_GATHER
        dist.destroy_process_group()


def check(tmp_path, world, rank, rotate, load_balance, b, heads, kv_heads, local_seq, head_dim, dtype, transposed):
    (f_peak, f_end), (b_peak, b_end) = measure(tmp_path, world, rank, rotate, load_balance, b, heads, kv_heads,
                                               local_seq, head_dim, dtype, transposed)
    # ones_like(out): grad_out laid out as the forward's output (grad_out_bshd None).
    p = longctx._core.torch_ring_attention_memory(
        b=b, q_heads=heads, kv_heads=kv_heads, local_seq=local_seq, head_dim=head_dim,
        elem=torch.tensor([], dtype=getattr(torch, dtype)).element_size(), world=world, rank=rank,
        load_balance=load_balance, rotate=rotate, qkv_transposed=transposed, grad_out_bshd=None, cpu=True, cpu_threads=1)
    assert (p["forward_peak"], p["forward_returned"]) == (f_peak, f_end), "forward: predicted vs measured"
    if dtype == "float32":
        assert (p["backward_peak"], p["backward_returned"]) == (b_peak, b_end), "backward: predicted vs measured"


# world, rank, rotate, load balance, micro-batch, heads, kv heads, local tokens, head_dim, dtype, transposed
CASES = [
    (2, 0, "allgather", True, 1, 4, 2, 64, 16, "float32", True),      # torchtitan's defaults, GQA
    (2, 1, "allgather", True, 2, 6, 3, 80, 20, "float32", True),      # the last rank: no half merged
    (3, 1, "alltoall", True, 2, 4, 2, 156, 24, "float32", True),      # all-to-all, a middle rank
    (4, 2, "alltoall", False, 1, 2, 2, 90, 12, "float32", True),      # no load balance: steps skipped
    (3, 0, "alltoall", True, 1, 1, 1, 16, 12, "float32", False),      # one head
    (4, 3, "allgather", False, 2, 6, 3, 86, 20, "bfloat16", True),    # bf16 (forward)
    (2, 0, "allgather", True, 1, 3, 1, 200, 32, "float32", False),    # contiguous q, k, v; 64-row blocks
]


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_torch_ring_attention_allocates_as_predicted(tmp_path, case):
    check(tmp_path, *case)


def drawn_cases(seed, n=6):
    rng = random.Random(seed)
    for _ in range(n):
        world = rng.choice([2, 3, 4])
        kv = rng.choice([1, 2, 3])
        yield (world, rng.randrange(world), rng.choice(["allgather", "alltoall"]), rng.random() < 0.6,
               rng.choice([1, 2]), kv * rng.choice([1, 2]), kv, 2 * rng.randint(8, 120), 4 * rng.randint(2, 8),
               rng.choice(["float32", "float32", "bfloat16"]), rng.random() < 0.7)


def test_torch_ring_attention_on_drawn_shapes(tmp_path):
    seed = drawn_seed()
    for i, case in enumerate(drawn_cases(seed)):
        print(f"seed {seed} case {i}: {case}")
        (tmp_path / str(i)).mkdir()
        check(tmp_path / str(i), *case)
