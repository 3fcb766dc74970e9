"""The mechanisms `--stack hf` across GPUs is built on (planner/stacks/hf/distributed.cpp), held
to the libraries themselves on the CPU: accelerate's bf16 mixed precision reduces in bf16 (the
reduce-scatter input and output the plan books in the parameters' dtype); torch's
context_parallel shards its buffers in place with resize_, which keeps each buffer's whole
storage (the plan keeps the [b, S] batch all step); the Trainer's shift_labels for one sample is
a view of the [b, S+1] pad; and accelerate's FSDP2 wrapping upcasts the shards to fp32 and puts
a tied table in one group with the final norm. Over a fake process group of 4 ranks, whose
collectives allocate nothing.

The whole step, profiled per phase against the plan: tests/stacks/test_hf_distributed_stack.py."""
import contextlib
import types

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")
cp_attention = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")


@contextlib.contextmanager
def fake_ranks(world, rank=0):
    from torch.testing._internal.distributed.fake_pg import FakeStore
    torch.distributed.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def test_accelerate_bf16_mixed_precision_reduces_in_bf16():
    # utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision: param_dtype and
    # reduce_dtype both the mixed-precision dtype (torchtitan reduces in fp32 instead).
    plugin = accelerate.utils.FullyShardedDataParallelPlugin(fsdp_version=2)
    plugin.set_mixed_precision("bf16")
    policy = plugin.mixed_precision_policy
    assert policy.param_dtype == torch.bfloat16
    assert policy.reduce_dtype == torch.bfloat16


def test_context_parallel_resize_keeps_each_buffers_storage():
    # torch's context_parallel: shard = gather + to_local, then buffer.resize_(shard.shape) and
    # copy_: the [b, S] storage stays allocated while the tensor shows [b, S / cp].
    world, seq = 4, 64
    with fake_ranks(world):
        mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
        ids = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
        labels = ids.clone()
        with cp_attention.context_parallel(mesh, buffers=[ids, labels], buffer_seq_dims=[1, 1],
                                           no_restore_buffers={ids, labels}):
            assert ids.shape == (1, seq // world)
            assert ids.untyped_storage().nbytes() == seq * 8
            assert labels.untyped_storage().nbytes() == seq * 8


def test_trainer_shift_labels_of_one_sample_is_a_view_of_the_pad():
    # transformers' Trainer._prepare_context_parallel_inputs: shift_labels =
    # pad(labels, (0, 1), value=-100)[..., 1:]; for one sample the plan books the [1, S+1] pad.
    seq = 32
    labels = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
    stand_in = types.SimpleNamespace(accelerator=types.SimpleNamespace(
        parallelism_config=types.SimpleNamespace(cp_enabled=True, sp_enabled=False, cp_backend="torch"),
        maybe_context_parallel=lambda **kwargs: contextlib.nullcontext()))
    model = torch.nn.Module()
    inputs = {"input_ids": labels.clone(), "labels": labels}
    prepare = transformers.Trainer._prepare_context_parallel_inputs
    try:
        _, out = prepare(stand_in, model, dict(inputs))
    except (AttributeError, TypeError) as e:  # a transformers whose preparation takes other state
        pytest.skip(f"Trainer._prepare_context_parallel_inputs needs more than its stand-in: {e}")
    if "shift_labels" not in out:
        pytest.skip("this transformers adds no shift_labels")
    shift = out["shift_labels"]
    assert shift.shape == (1, seq)
    assert shift.untyped_storage().nbytes() == (seq + 1) * 8  # the pad's: .contiguous() keeps the view
    assert out["position_ids"].untyped_storage().nbytes() == seq * 8  # arange(S).expand(b, -1)


@pytest.mark.parametrize("tied", [True, False])
def test_accelerate_fsdp2_upcasts_the_shards_and_groups_a_tied_table_with_the_tail(tied, monkeypatch):
    # utils/fsdp_utils.py fsdp2_prepare_model: every decoder layer its own group, the
    # parameters upcast to fp32 before sharding, and fully_shard([final norm, (embedding,)
    # lm_head], reshard_after_forward=False): a tied table in the tail group, an untied
    # embedding alone.
    from torch.distributed.fsdp import FSDPModule
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    world = 4
    for k, v in {"WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29511"}.items():
        monkeypatch.setenv(k, v)
    config = transformers.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, vocab_size=256, tie_word_embeddings=tied)
    with fake_ranks(world):
        accelerate.PartialState(cpu=True)
        model = transformers.Qwen3ForCausalLM(config).to(torch.bfloat16)
        plugin = accelerate.utils.FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap")
        plugin.set_mixed_precision("bf16")
        stand_in = types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin), torch_device_mesh=None,
                                         parallelism_config=None, mixed_precision="bf16", is_main_process=True,
                                         device=torch.device("cpu"))
        model = fsdp2_prepare_model(stand_in, model)
        for layer in model.model.layers:
            assert isinstance(layer, FSDPModule)
        for p in model.parameters():
            assert p.dtype == torch.float32
        # One fully_shard call over several modules gives them one state (one parameter group).
        embed, norm = model.model.embed_tokens, model.model.norm
        assert isinstance(embed, FSDPModule) and isinstance(norm, FSDPModule)
        assert (embed._get_fsdp_state() is norm._get_fsdp_state()) == tied
        assert norm._get_fsdp_state() is model.lm_head._get_fsdp_state()
