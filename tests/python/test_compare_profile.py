"""`compare` of a PyTorch profiler trace of a Hugging Face model trained on CPU, profiled after a
warm-up step: the trace counts only what was allocated while it ran, and compare adds back what
existed before (the parameters and AdamW's moments). Its error must equal the true one, which
this test computes from the tensors alive when profiling began."""
import gzip

import pytest

import longctx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SEQ = 128


def storage_bytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
    return total


def profile_second_step(tmp_path, warm_up):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=SEQ,
                                      attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ids = torch.randint(0, config.vocab_size, (1, SEQ))

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if warm_up:
        step()
    state = [v for s in optimizer.state.values() for v in s.values()]
    before = storage_bytes(list(model.parameters()) + state)
    trace = tmp_path / "profile.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    prof.export_chrome_trace(str(trace))
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=SEQ, no_search=True, techniques="none")
    return plan, trace, before


@pytest.mark.parametrize("warm_up", [True, False])
def test_compare_adds_back_what_existed_before_profiling(tmp_path, warm_up):
    plan, trace, before = profile_second_step(tmp_path, warm_up)
    c = longctx.compare(plan, trace)
    assert c["trace_source"] == "pytorch-profiler"
    # The trace's own peak, relative to what existed when profiling began, plus that.
    true_peak = c["measured_peak_bytes"] - c["baseline_bytes"] + before
    true_error = (c["predicted_peak_bytes"] - true_peak) / true_peak
    assert abs(c["error"] - true_error) < 0.01, (c, before)
    assert {p["phase"] for p in c["phases"]} == {"forward", "backward", "optimizer"}
    assert all(p["measured_bytes"] > 0 for p in c["phases"]), c["phases"]
    assert c["phase_note"] == ""

    # The same trace gzip-compressed reads alike.
    gz = tmp_path / "profile.json.gz"
    gz.write_bytes(gzip.compress(trace.read_bytes()))
    assert longctx.compare(plan, gz)["measured_peak_bytes"] == c["measured_peak_bytes"]
