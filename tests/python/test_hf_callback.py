"""The Trainer callback measures a tiny Llama's first step on CPU and reports it beside the plan."""
import pytest

import longctx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from longctx.hf import PHASES, MemoryReportCallback  # noqa: E402

SEQ = 128


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, vocab, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_the_callback_reports_measured_beside_predicted_for_each_phase(tmp_path):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=SEQ)
    model = transformers.LlamaForCausalLM(config)
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=SEQ, no_search=True, techniques="none")
    reports = []
    callback = MemoryReportCallback(plan, report_to=reports.append)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=3,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                                          dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=RandomTokens(config.vocab_size, 4),
                                   callbacks=[callback])
    trainer.train()

    assert len(reports) == 1, "one report, at the end of the measured step"
    rows = {r.phase: r for r in callback.rows}
    assert set(rows) == set(PHASES)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    for r in rows.values():
        assert r.predicted_bytes > 0
        # Every phase holds at least the parameters, which the measurement adds as its baseline.
        assert r.measured_bytes > params
        assert r.error is not None
    # The second step starts with AdamW's two moments beside the parameters, and backward
    # adds the weights' gradients.
    for r in rows.values():
        assert r.measured_bytes >= 3 * params
    assert rows["backward"].measured_bytes >= 4 * params
    assert "measured" in reports[0] and "predicted" in reports[0]


def test_the_callback_refuses_a_plan_of_another_step_naming_what_differs(tmp_path):
    """A plan searched at another micro-batch, or with checkpointing the Trainer does not run,
    predicts another step: the callback refuses it before training, naming each difference."""
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=SEQ)
    model = transformers.LlamaForCausalLM(config)
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=SEQ, no_search=True, techniques="checkpoint",
                        micro_batch=2, checkpoint="full")
    assert "micro_batch=2" in repr(plan)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=1,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=RandomTokens(config.vocab_size, 4),
                                   callbacks=[MemoryReportCallback(plan)])
    with pytest.raises(longctx.BadInput) as refused:
        trainer.train()
    message = str(refused.value)
    assert "micro-batch" in message and "per_device_train_batch_size is 1" in message
    assert "checkpointing" in message
    assert "dtype" not in message  # fp32 both
    assert "world size" not in message  # one process both
    # Checkpointing every other layer is not the Trainer's every layer; two ranks' figures are
    # not one process's.
    for other, what in ((dict(gpus=1, checkpoint="every:2", micro_batch=1), "parallel.checkpoint is every:2"),
                        (dict(gpus=2, checkpoint="full", micro_batch=1), "the plan's cluster.gpus is 2")):
        plan = longctx.plan(config, gpu="cpu", seq=SEQ, no_search=True, techniques="checkpoint,zero3", **other)
        args.gradient_checkpointing = True
        with pytest.raises(longctx.BadInput, match=what):
            transformers.Trainer(model=model, args=args, train_dataset=RandomTokens(config.vocab_size, 4),
                                 callbacks=[MemoryReportCallback(plan)]).train()


def test_the_callback_refuses_batches_of_another_length(tmp_path):
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=2 * SEQ)
    model = transformers.LlamaForCausalLM(config)
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=2 * SEQ, no_search=True, techniques="none")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=1,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=RandomTokens(config.vocab_size, 4),
                                   callbacks=[MemoryReportCallback(plan)])
    with pytest.raises(longctx.BadInput, match=f"batches hold {SEQ} tokens, the plan's train.seq is {2 * SEQ}"):
        trainer.train()


def test_the_callback_checks_its_arguments_when_made():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=SEQ, no_search=True)
    for kwargs, field in (({"plan": "not a plan"}, "plan"), ({"plan": plan, "step": -1}, "step"),
                          ({"plan": plan, "step": True}, "step"), ({"plan": plan, "report_to": 5}, "report_to")):
        with pytest.raises(longctx.BadInput) as refused:
            MemoryReportCallback(**kwargs)
        assert refused.value.field == field


def test_the_step_is_any_integer_and_a_run_ending_before_it_says_so(tmp_path):
    """step takes an int by Python's rule (numpy's too); training that ends before the measured
    step warns instead of reporting nothing without a word."""
    np = pytest.importorskip("numpy")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=SEQ)
    plan = longctx.plan(config, gpus=1, gpu="cpu", seq=SEQ, no_search=True, techniques="none")
    assert MemoryReportCallback(plan, step=np.int64(2)).step == 2
    with pytest.raises(longctx.BadInput):
        MemoryReportCallback(plan, step=-1)
    reports = []
    callback = MemoryReportCallback(plan, report_to=reports.append)  # step 1
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=1,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                                          dataloader_num_workers=0)
    trainer = transformers.Trainer(model=transformers.LlamaForCausalLM(config), args=args,
                                   train_dataset=RandomTokens(config.vocab_size, 2), callbacks=[callback])
    with pytest.warns(UserWarning, match="before step 1"):
        trainer.train()
    assert reports == [] and callback.rows == []
