"""What the stacks' tests across fake ranks share: torch's ring attention run with the CPU's
flash kernel, a fake process group, and the plan held to the most any ring rank holds."""
import contextlib

import pytest

torch = pytest.importorskip("torch")


# Context parallel on the CPU. torch's dispatcher hands scaled_dot_product_attention on
# DTensors to its ring attention for the CUDA kernels only (_context_parallel/_attention.py:
# _enable_cp_dtensor_dispatcher's handlers, and _sharding_rules.register_cp_sharding_rules for
# their output placements); the CPU's flash kernel and its backward get the same treatment here:
# unwrap to local tensors, run _templated_ring_attention(_backward) with the CPU op, as
# _scaled_dot_product_ring_flash_attention(_backward) does with the CUDA one, and wrap the
# results sharded on the sequence, Shard(2), which is what the CUDA ops' rules give them.
def _bound_arguments(op_call, args, kwargs):
    bound = {a.name: a.default_value for a in op_call._schema.arguments if a.has_default_value()}
    bound.update(zip((a.name for a in op_call._schema.arguments), args))
    bound.update(kwargs)
    return bound


def _sequence_sharded(mesh, local):
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    shape = list(local.shape)
    shape[2] *= mesh.size()
    stride = torch._prims_common.make_contiguous_strides_for(shape)
    return DTensorSpec(mesh, (Shard(2),), tensor_meta=TensorMeta(torch.Size(shape), tuple(stride), local.dtype))


def _cpu_ring_handler(backward):
    from torch.distributed.tensor import DTensor
    ring = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")
    aten = torch.ops.aten

    def handler(op_call, args, kwargs):
        info = DTensor._op_dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        a = _bound_arguments(op_call, info.local_args, info.local_kwargs)
        assert a["attn_mask"] is None, "torch's ring attention takes no mask"
        mesh = info.compute_mesh
        common = dict(query=a["query"], key=a["key"], value=a["value"], is_causal=a["is_causal"],
                      dropout_p=a["dropout_p"], scale=a["scale"])
        if backward:
            results = ring._templated_ring_attention_backward(
                mesh.get_group(), 2, aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                grad_out=a["grad_out"], grad_out_name="grad_out", out=a["out"], logsumexp=a["logsumexp"], **common)[:3]
        else:
            results = ring._templated_ring_attention(mesh.get_group(), 2, aten._scaled_dot_product_flash_attention_for_cpu,
                                                     **common)[:2]
        return DTensor._op_dispatcher.wrap(tuple(results), tuple(_sequence_sharded(mesh, r) for r in results))
    return handler


@contextlib.contextmanager
def cpu_ring_attention():
    """The CPU flash kernel's ring handlers beside torch's, and torch's context-parallel state
    (the dispatcher, load balancing) put back after. The handlers are yielded (torchtitan's
    apply_cp enables the dispatcher once, before they are merged in) and also put in torch's
    own table (`custom_ops`), which `context_parallel(...)` merges in at each entry, as
    accelerate's maybe_context_parallel enters it every step."""
    from torch.distributed.tensor import DTensor
    ring = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")
    handlers, balance = DTensor._op_dispatcher._custom_op_handlers, ring._cp_options.enable_load_balance
    cpu = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default: _cpu_ring_handler(False),
           torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _cpu_ring_handler(True)}
    ring.custom_ops.update(cpu)
    try:
        yield cpu
    finally:
        for op in cpu:
            ring.custom_ops.pop(op, None)
        ring._disable_context_parallel_dispatcher()
        DTensor._op_dispatcher._custom_op_handlers = handlers
        ring._cp_options.enable_load_balance = balance


@contextlib.contextmanager
def fake_ranks(world, rank=0):
    """Rank `rank` of `world` ranks whose collectives allocate nothing."""
    if world == 1:
        yield
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore
    torch.distributed.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def most_of_any_rank(comparisons):
    """The ring's ranks differ inside their attention (which blocks each skips), and the last
    holds no copy of its output; the plan is the most any of them holds: each phase's measured
    peak as the most of any of them."""
    worst = dict(comparisons[0])
    phases = {p["phase"]: dict(p) for p in worst["phases"]}
    for c in comparisons[1:]:
        for p in c["phases"]:
            phases[p["phase"]]["measured_bytes"] = max(phases[p["phase"]]["measured_bytes"], p["measured_bytes"])
    worst["phases"] = list(phases.values())
    worst["measured_peak_bytes"] = max(c["measured_peak_bytes"] for c in comparisons)
    worst["error"] = (worst["predicted_peak_bytes"] - worst["measured_peak_bytes"]) / worst["measured_peak_bytes"]
    return worst


