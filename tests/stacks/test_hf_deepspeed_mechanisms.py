"""The mechanisms `--stack hf` under DeepSpeed books (planner/stacks/hf/deepspeed.cpp), held to
DeepSpeed and torch on the CPU: the batch DeepSpeed's UlyssesSPDataLoaderAdapter hands a rank
(the collator's four keys become input_ids, attention_mask, position_ids and shift_labels,
[b, S/u] int64 each, on the host; labels are gone, so the model returns logits and the loss is
taken on shift_labels), and a tied table's gradient reaching the post-accumulate hook ZeRO-3
registers once, summed: in place where the first gradient is one a Function returned from its
saved tensors (Liger's loss, under the arctic stack's DeepSpeed too)."""
import pytest

torch = pytest.importorskip("torch")


def test_the_adapter_hands_each_rank_four_int64_slices(monkeypatch):
    ulysses_sp = pytest.importorskip("deepspeed.runtime.sequence_parallel.ulysses_sp")
    u, b, S = 4, 1, 64

    # Every rank of the group loaded the same sample: the gathers copy this rank's tensor.
    def all_gather(outputs, tensor, group=None):
        for out in outputs:
            out.copy_(tensor)

    def all_gather_object(outputs, obj, group=None):
        for i in range(len(outputs)):
            outputs[i] = obj

    monkeypatch.setattr(ulysses_sp.dist, "all_gather", all_gather)
    monkeypatch.setattr(ulysses_sp.dist, "all_gather_object", all_gather_object)
    ids = torch.arange(S).unsqueeze(0)
    batch = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones(b, S, dtype=torch.long),
             "position_ids": torch.arange(S).unsqueeze(0)}  # TRL's collator with return_position_ids
    adapter = ulysses_sp.UlyssesSPDataLoaderAdapter([batch], sp_rank=1, sp_group=None, sp_world_size=u, device="cpu")
    shard = next(iter(adapter))
    assert set(shard) == {"input_ids", "attention_mask", "position_ids", "shift_labels"}  # the planner's four keys
    for key, t in shard.items():
        assert t.shape == (b, S // u) and t.dtype == torch.int64 and t.device.type == "cpu", key
    # The rank's slice of the labels shifted by one (the pad's -100 on the last rank only).
    assert torch.equal(shard["shift_labels"], ids[:, S // u + 1:2 * S // u + 1])
    assert len(adapter.micro_batches) == u - 1  # one refill serves u steps


def test_a_tied_table_reaches_the_post_accumulate_hook_once():
    V, h, n = 11, 4, 5
    weight = torch.nn.Parameter(torch.randn(V, h))
    seen = []
    weight.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    tokens = torch.randint(0, V, (n,))
    x = torch.nn.functional.embedding(tokens, weight)  # the embedding's use
    logits = x @ weight.t()  # lm_head's, tied
    logits.logsumexp(-1).sum().backward()
    assert len(seen) == 1  # once, after both uses: the sum deepspeed_embedding_backward hands the hook
    assert torch.equal(seen[0], weight.grad)


def test_a_gradient_returned_from_saved_tensors_takes_a_tied_tables_other_in_place():
    """What the arctic stack books for Liger's loss with a tied table: a Function that makes
    the weight's gradient in forward and returns it from its saved tensors (Liger's
    LigerFusedLinearCrossEntropyFunction) hands the weight's input buffer the only reference
    once the node has released them, so the embedding's gradient is added into it in place."""
    V, h, n = 96, 32, 8

    class FusedLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            logits = x @ w.t()
            p = logits.softmax(-1)
            ctx.save_for_backward((p @ w).detach(), (p.t() @ x).detach())
            return logits.logsumexp(-1).sum()

        @staticmethod
        def backward(ctx, grad):
            grad_input, grad_weight = ctx.saved_tensors
            return grad_input, grad_weight

    weight = torch.nn.Parameter(torch.randn(V, h))
    loss = FusedLoss.apply(torch.nn.functional.embedding(torch.randint(0, V, (n,)), weight), weight)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        loss.backward()
    adds = [e.name for e in prof.events() if e.name in ("aten::add", "aten::add_")]
    assert adds == ["aten::add_"]
