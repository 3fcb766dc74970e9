"""`--stack torchtitan` held to torchtitan itself: its Llama 3 model (torchtitan 0.2.2,
models/llama3) built at tiny odd shapes, trained on the CPU for two steps as its trainer's
forward_backward_step runs one (the model, components/loss.py's cross_entropy_loss over the
token count, `del pred`, backward; torch's fused AdamW, torchtitan's default implementation),
the second under the PyTorch profiler (profile_memory=True, fp32, one thread), with each of
its activation checkpointing modes applied by its own apply_ac. The peak and every phase must
be within 1% of the prediction. One more case per run is drawn from a seed
(LONGCTX_VALIDATION_SEED, else today's date)."""
import datetime
import os
import random

import pytest

import longctx
from conftest import profile_second_step_of, assert_phases_within

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
model_module = pytest.importorskip("torchtitan.models.llama3.model.model")
args_module = pytest.importorskip("torchtitan.models.llama3.model.args")
ac_module = pytest.importorskip("torchtitan.distributed.activation_checkpoint")
loss_module = pytest.importorskip("torchtitan.components.loss")
job_config = pytest.importorskip("torchtitan.config.job_config")

def model_args(dim, layers, heads, kv_heads, vocab, multiple_of, seq):
    return args_module.TransformerModelArgs(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads,
                                            vocab_size=vocab, multiple_of=multiple_of, max_seq_len=seq)


def hf_config(args, model):
    """The same shapes as a transformers config, which is what longctx reads."""
    return transformers.LlamaConfig(hidden_size=args.dim, num_hidden_layers=args.n_layers,
                                    num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
                                    intermediate_size=model.layers["0"].feed_forward.w1.weight.shape[0],
                                    vocab_size=args.vocab_size, tie_word_embeddings=False)


def profile_second_step(args, batch, ac, trace_path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = model_module.Transformer(args)
    with torch.no_grad():
        model.init_weights()
    if ac != "none":
        # A torchtitan run builds its model once; its layer counter is module state.
        ac_module._layer_sac_count = 0
        mode, option = ("full", "2") if ac == "full" else ("selective", ac.split(":")[1])
        ac_module.apply_ac(model, job_config.ActivationCheckpoint(mode=mode, selective_ac_option=option))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, foreach=False)
    ids = torch.randint(0, args.vocab_size, (batch, args.max_seq_len))
    labels = torch.randint(0, args.vocab_size, (batch, args.max_seq_len))

    def step():
        pred = model(ids)
        loss = loss_module.cross_entropy_loss(pred, labels) / labels.numel()
        del pred
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


    profile_second_step_of(step, trace_path)
    return model


def check(tmp_path, args, batch, ac):
    trace = tmp_path / "profile.json"
    model = profile_second_step(args, batch, ac, trace)
    knobs = {"micro_batch": batch}
    if ac != "none":
        knobs["checkpoint"] = ac.replace("selective:", "every:")
    plan = longctx.plan(hf_config(args, model), gpus=1, gpu="cpu", seq=args.max_seq_len, no_search=True,
                        techniques="checkpoint", stack="torchtitan", dtype="fp32", **knobs)
    assert_phases_within(longctx.compare(plan, trace))


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
]


@pytest.mark.parametrize("dim,layers,heads,kv,vocab,multiple_of,seq,batch,ac", CASES,
                         ids=[f"d{d}-l{l}-h{h}kv{k}-{s}x{b}-{ac}" for d, l, h, k, _, _, s, b, ac in CASES])
def test_torchtitan_stack_matches_torchtitan(tmp_path, dim, layers, heads, kv, vocab, multiple_of, seq, batch, ac):
    check(tmp_path, model_args(dim, layers, heads, kv, vocab, multiple_of, seq), batch, ac)


def drawn_case(seed):
    rng = random.Random(seed)
    kv = rng.choice([1, 2, 3])
    heads = kv * rng.choice([1, 2, 3])
    dim = heads * 2 * rng.randint(2, 8)
    layers = rng.randint(1, 4)
    ac = rng.choice(["none", "full"] + [f"selective:{k}" for k in range(2, layers + 1)])
    return (dim, layers, heads, kv, 64 * rng.randint(2, 10), 8 * rng.randint(1, 4), 32 * rng.randint(2, 8),
            rng.choice([1, 1, 2, 3]), ac)


def test_torchtitan_stack_on_a_drawn_shape(tmp_path):
    seed = int(os.environ.get("LONGCTX_VALIDATION_SEED", datetime.date.today().strftime("%Y%m%d")))
    case = drawn_case(seed)
    print(f"seed {seed}: dim, layers, heads, kv heads, vocab, multiple_of, seq, micro-batch, ac = {case}")
    dim, layers, heads, kv, vocab, multiple_of, seq, batch, ac = case
    check(tmp_path, model_args(dim, layers, heads, kv, vocab, multiple_of, seq), batch, ac)
