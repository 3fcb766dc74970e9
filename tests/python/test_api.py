"""The Python API answers as the CLI does, takes every kind of model, and fails typed."""
import json
import os
import pathlib
import subprocess
import types

import pytest

import longctx

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("LONGCTX_CLI")

TINY = {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256, "model_type": "llama"}


def cli_json(*args):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    return json.loads(subprocess.run([CLI, *args, "--json"], check=True, capture_output=True, text=True).stdout)


def test_max_context_equals_the_cli():
    answer = longctx.max_context(model="llama-3.1-8b", gpus=8)
    assert answer.max_tokens == cli_json("max-context")["max_tokens"]
    assert answer.max_tokens > 0 and answer.max_tokens % answer.granularity == 0
    assert answer.plan.prediction.feasible


def test_max_context_on_other_clusters_equals_the_cli():
    answer = longctx.max_context("tiny-gqa", gpus=2, gpu="cpu", techniques=["zero3", "checkpoint"], ladder=False)
    cli = cli_json("max-context", "--model", "tiny-gqa", "--gpus", "2", "--gpu", "cpu", "--techniques", "zero3,checkpoint",
                   "--no-ladder")
    assert answer.max_tokens == cli["max_tokens"]
    assert answer.binding == cli["binding"]


def test_plan_equals_the_cli_and_fixes_the_knobs_given():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", sharding="zero3", offload_optimizer=True)
    cli = cli_json("plan", "--model", "tiny-gqa", "--gpus", "1", "--gpu", "cpu", "--seq", "2K", "--sharding", "zero3",
                   "--offload-optimizer")
    assert plan.parallel["sharding"] == "zero3" and plan.parallel["offload_optimizer"] is True
    assert plan.prediction.peak_device_bytes == cli["prediction"]["peak_device_bytes"]
    assert plan.parallel == cli["parallel"]
    assert plan.search["evaluated"] == cli["search"]["evaluated"]


def test_the_arctic_stack_answers_as_the_cli_does():
    techniques = "zero3,offload-optimizer,checkpoint,offload-checkpoints,tiled-mlp,tiled-loss,ulysses"
    answer = longctx.max_context("llama-3.1-8b", gpus=8, techniques=techniques, stack="arctic", ladder=False)
    cli = cli_json("max-context", "--stack", "arctic", "--techniques", techniques, "--no-ladder")
    assert answer.max_tokens == cli["max_tokens"] and answer.plan.data["train"]["stack"]["name"] == "arctic"
    plan = longctx.plan("llama-3.1-8b", gpus=8, seq="16K", stack="arctic", arctic_model="huggingface")
    assert plan.data["train"]["stack"]["arctic_model"] == "huggingface"
    with pytest.raises(longctx.BadInput):
        longctx.plan("llama-3.1-8b", gpus=8, seq="64K", stack="hf", arctic_model="liger")


def test_a_plan_round_trips_through_its_json_and_explains_itself():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=1024, no_search=True, techniques="none")
    again = longctx.Plan.from_json(plan.to_json())
    assert again.prediction == plan.prediction
    text = again.explain()
    assert "tiny-gqa" in text and "peak" in text


def test_a_plan_file_written_by_the_cli_is_read(tmp_path):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    out = tmp_path / "p.json"
    subprocess.run([CLI, "plan", "--model", "tiny-gqa", "--gpus", "1", "--gpu", "cpu", "--seq", "1K", "-o", str(out)],
                   check=True, capture_output=True)
    plan = longctx.Plan.from_json(out.read_text())
    assert plan.seq == 1024


def test_models_are_taken_as_names_paths_folders_dicts_and_configs(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    by_dict = longctx.model_config(TINY)
    assert by_dict["hidden_size"] == 64 and by_dict["num_key_value_heads"] == 2
    assert longctx.model_config(folder)["intermediate_size"] == 160
    assert longctx.model_config(str(folder / "config.json"))["vocab_size"] == 256
    assert "llama-3.1-8b" in longctx.models()
    assert longctx.model_config("llama-3.1-8b")["hidden_size"] == 4096
    peak_dict = longctx.plan(TINY, gpus=1, gpu="cpu", seq=512, no_search=True).prediction.peak_device_bytes
    peak_dir = longctx.plan(folder, gpus=1, gpu="cpu", seq=512, no_search=True).prediction.peak_device_bytes
    assert peak_dict == peak_dir


def test_a_transformers_config_is_a_model():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k != "model_type"})
    assert longctx.model_config(config)["num_attention_heads"] == 4


def test_a_config_that_cannot_convert_itself_is_bad_input():
    """A config object whose to_dict() raises is refused as the model argument, naming what
    it raised, not passed through as an error of the planner's own."""
    class Broken:
        def to_dict(self):
            raise KeyError("rope_scaling")

    with pytest.raises(longctx.BadInput, match=r"model.*to_dict\(\) raised KeyError"):
        longctx.model_config(Broken())


@pytest.mark.parametrize("model_type, extra", [("llama", {}), ("mistral", {}), ("qwen2", {}), ("qwen3", {}),
                                               ("qwen3", {"use_sliding_window": True, "max_window_layers": 0}),
                                               ("qwen2", {"use_sliding_window": True, "max_window_layers": 0})])
def test_keys_a_config_leaves_out_take_the_defaults_transformers_gives_them(model_type, extra):
    """num_key_value_heads, head_dim and sliding_window left out of a config.json: longctx reads
    the model transformers' own config class builds from the same keys."""
    transformers = pytest.importorskip("transformers")
    # 64 heads: none of the families' kv-head defaults (8, 32, the head count) equals another's.
    shape = {"model_type": model_type, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
             "num_attention_heads": 64, "vocab_size": 1000, **extra}
    theirs = transformers.AutoConfig.for_model(**shape)
    ours = longctx.model_config(shape)
    assert ours["num_key_value_heads"] == theirs.num_key_value_heads
    assert ours["head_dim"] == (getattr(theirs, "head_dim", None) or theirs.hidden_size // theirs.num_attention_heads)
    assert ours.get("sliding_window") == getattr(theirs, "sliding_window", None)


def test_errors_are_typed_and_name_the_field():
    with pytest.raises(longctx.BadInput) as bad:
        longctx.plan("tiny-gqa", gpus=0, seq=1024)
    assert bad.value.field == "--gpus" and "1 or more" in bad.value.message
    with pytest.raises(longctx.BadInput) as unknown:
        longctx.plan("tiny-gqa", gpus=1, seq=1024, bogus=2)
    assert unknown.value.field == "bogus"
    with pytest.raises(longctx.BadInput) as model:
        longctx.plan({"hidden_size": 64}, gpus=1, seq=1024)
    assert model.value.field.startswith("model.")
    with pytest.raises(longctx.BadInput):
        longctx.model_config(ROOT)  # a folder without config.json
    with pytest.raises(longctx.NoFit) as nofit:
        longctx.plan("llama-3.1-8b", gpus=1, seq="64M")
    assert nofit.value.exit_status == 3


def test_compare_reads_a_longctx_trace():
    plan = longctx.Plan.from_json((ROOT / "traces" / "gqa-ckpt-4k.plan.json").read_text())
    result = longctx.compare(plan, ROOT / "traces" / "gqa-ckpt-4k.trace.json")
    assert result["trace_source"] == "longctx"
    assert result["measured_peak_bytes"] > 0
    assert abs(result["error"]) < 0.01
    assert any(p["measured_bytes"] > 0 for p in result["phases"])  # -1: a phase the trace lacks


def test_knobs_are_the_knob_table():
    knobs = longctx.knobs()
    assert knobs["sharding"] == "text" and knobs["offload_params"] == "switch" and knobs["ulysses"] == "int"


def test_compare_refuses_a_trace_of_another_model(tmp_path):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    plan_file, trace = tmp_path / "p.json", tmp_path / "t.json"
    subprocess.run([CLI, "plan", "--model", "tiny-gqa", "--gpus", "1", "--gpu", "cpu", "--seq", "256", "--no-search",
                    "-o", str(plan_file)], check=True, capture_output=True)
    subprocess.run([CLI, "run", "--plan", str(plan_file), "--steps", "1", "--trace", str(trace)], check=True,
                   capture_output=True)
    assert longctx.compare(longctx.Plan.from_json(plan_file.read_text()), trace)["measured_peak_bytes"] > 0
    other = longctx.plan("tiny-odd", gpus=1, gpu="cpu", seq=256, no_search=True, techniques="none")
    with pytest.raises(longctx.BadInput) as refused:
        longctx.compare(other, trace)
    assert refused.value.field == "--trace"


def test_the_settings_are_the_planners_settings_table():
    keywords = longctx.setting_keywords()
    assert {"dtype", "grad_dtype", "stack", "attention", "arctic_model", "hf_attention_mask", "hf_loss"} <= set(keywords)
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True, stack="hf", hf_attention_mask=False)
    assert plan.data["train"]["stack"]["attention_mask"] is False
    with pytest.raises(longctx.BadInput) as typed:
        longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, stack=3)
    assert typed.value.field == "stack"
    with pytest.raises(longctx.BadInput) as knob:
        longctx.max_context("tiny-gqa", gpus=1, gpu="cpu", sharding="zero3")
    assert knob.value.field == "sharding"


def test_a_plan_file_is_refused_as_the_cli_refuses_it_naming_its_field():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True)
    data = json.loads(plan.to_json())
    data["parallel"]["sharding"] = "zero1"
    with pytest.raises(longctx.BadInput) as from_file:
        longctx.Plan.from_json(data)
    assert from_file.value.field == "parallel.sharding"
    with pytest.raises(longctx.BadInput) as from_keywords:
        longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True, sharding="zero1")
    assert from_keywords.value.field == "--sharding" and from_keywords.value.message == from_file.value.message


# Arguments of another type than the signature's (python/longctx/_core.pyi, the docstrings):
# the package's own BadInput naming the argument, never a binding TypeError or AttributeError.
WRONG_TYPES = [
    ("gpus", lambda: longctx.plan("tiny-gqa", gpus=2**64, gpu="cpu", seq="1K")),
    ("gpus", lambda: longctx.plan("tiny-gqa", gpus="1", gpu="cpu", seq="1K")),
    ("gpu", lambda: longctx.plan("tiny-gqa", gpus=1, gpu=None, seq="1K")),
    ("ladder", lambda: longctx.max_context("tiny-gqa", gpus=1, gpu="cpu", ladder="no")),
    ("techniques", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", techniques=None)),
    ("ulysses", lambda: longctx.plan("tiny-gqa", gpus=2, gpu="cpu", seq="1K", ulysses="2")),
    ("seq", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512.0)),
    ("attention", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", attention="")),
    ("budget", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", budget="")),
    ("plan", lambda: longctx.Plan.from_json(None)),
    ("plan", lambda: longctx.Plan.from_json("[1]")),
]


@pytest.mark.parametrize("field,call", WRONG_TYPES)
def test_arguments_of_other_types_raise_bad_input_naming_them(field, call):
    with pytest.raises(longctx.BadInput) as e:
        call()
    assert e.value.field == field


def test_a_plans_methods_check_their_arguments():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", no_search=True, stack=None)
    for field, call in [("stack", lambda: plan.export(None)), ("live_rows", lambda: plan.explain("x")),
                        ("live_rows", lambda: plan.explain(-1)),
                        ("trace", lambda: longctx.compare(plan, None)), ("plan", lambda: longctx.compare("x", "y"))]:
        with pytest.raises(longctx.BadInput) as e:
            call()
        assert e.value.field == field
    # The types the signatures say still work: ints for int knobs, any iterable of names.
    assert longctx.plan("tiny-gqa", gpus=2, gpu="cpu", seq="1K", ulysses=2, no_search=True).parallel["ulysses"] == 2
    assert longctx.max_context("tiny-gqa", gpus=1, gpu="cpu", techniques=("zero3", "checkpoint"), ladder=False).max_tokens > 0


class _Index:
    """An integer by Python's rule (operator.index), as numpy's and torch's are, not an int."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def test_integers_by_pythons_rule_count_as_ints():
    """numpy.int64(8) from a sweep, or any object with __index__, is a count, a size, a length
    and an int knob; a bool, a float or a numeric string still is not."""
    as_ints = longctx.plan("tiny-gqa", gpus=2, gpu="cpu", seq=1024, budget=1 << 30, ulysses=2, no_search=True)
    indexed = longctx.plan("tiny-gqa", gpus=_Index(2), gpu="cpu", seq=_Index(1024), budget=_Index(1 << 30),
                           ulysses=_Index(2), no_search=True)
    assert indexed.to_json() == as_ints.to_json()
    numpy = pytest.importorskip("numpy")
    assert longctx.plan("tiny-gqa", gpus=numpy.int64(2), gpu="cpu", seq=numpy.int32(1024), ulysses=numpy.int8(2),
                        budget=numpy.uint64(1 << 30), no_search=True).to_json() == as_ints.to_json()
    for field, call in [("gpus", lambda: longctx.plan("tiny-gqa", gpus=numpy.bool_(True), gpu="cpu", seq="1K")),
                        ("seq", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=numpy.float64(1024))),
                        ("ulysses", lambda: longctx.plan("tiny-gqa", gpus=2, gpu="cpu", seq="1K", ulysses=2.0))]:
        with pytest.raises(longctx.BadInput) as e:
            call()
        assert e.value.field == field


def test_text_that_is_not_unicode_is_refused_naming_its_argument(tmp_path):
    """A lone surrogate (a file name decoded with surrogateescape) has no UTF-8 for the binding:
    BadInput naming the argument, not the binding's TypeError."""
    for field, call in [("model", lambda: longctx.plan("tiny-gqa\udc80", gpus=1, gpu="cpu", seq="1K")),
                        ("model", lambda: longctx.plan(os.fsencode(str(tmp_path)) + b"/\xff", gpus=1, gpu="cpu", seq="1K")),
                        ("model", lambda: longctx.plan({"model_type": "llama\udc80"}, gpus=1, gpu="cpu", seq="1K")),
                        ("gpu", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu\udc80", seq="1K")),
                        ("seq", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K\udc80")),
                        ("budget", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", budget="1GiB\udc80")),
                        ("techniques", lambda: longctx.max_context("tiny-gqa", gpus=1, gpu="cpu", techniques=["zero3\udc80"])),
                        ("attention", lambda: longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", attention="sdpa\udc80"))]:
        with pytest.raises(longctx.BadInput) as e:
            call()
        assert e.value.field == field, (field, e.value)


def test_a_deeply_nested_plan_is_refused_not_a_crash():
    """100,000 nested arrays once overflowed the planner's stack and killed the interpreter."""
    deep = '{"schema": ' + "[" * 100000 + "]" * 100000 + "}"
    ok, payload = longctx._core.explain(deep, 0)
    assert not ok and "64 levels" in json.loads(payload)["message"]
    with pytest.raises(longctx.BadInput):
        longctx.Plan.from_json(deep)


def test_every_stacks_answer_equals_the_clis_and_says_who_exports_it(tmp_path):
    """max_context(stack="all") is `max-context --stack all`: longctx's own answer, then each
    stack's longest context or why it cannot run the model there; every plan says which
    stacks' files run it, and `-o` writes each stack's plan file beside the first."""
    answer = longctx.max_context("tiny-gqa", gpus=2, gpu="cpu", stack="all", ladder=False)
    out = tmp_path / "plan.json"
    cli = cli_json("max-context", "--model", "tiny-gqa", "--gpus", "2", "--gpu", "cpu", "--stack", "all", "--no-ladder",
                   "-o", str(out))
    assert answer.max_tokens == cli["max_tokens"]
    assert [e["stack"] for e in answer.exports] == ["deepspeed", "hf", "arctic", "torchtitan"]
    assert set(answer.stacks) == {"longctx", "hf", "arctic", "torchtitan"}
    for entry in cli["stacks"]:
        mine = answer.stacks[entry["stack"]]
        if "refusal" in entry:
            assert isinstance(mine, longctx.BadInput) and mine.field == entry["refusal"]["field"]
            assert not (tmp_path / f"plan.{entry['stack']}.json").exists()
        else:
            assert mine.max_tokens == entry["max_tokens"]
            assert mine.plan.exportable_by == [e["stack"] for e in entry["exports"] if e["exports"]]
            if entry["stack"] != "longctx":
                written = longctx.Plan.load(tmp_path / f"plan.{entry['stack']}.json")
                assert written.data["train"]["stack"]["name"] == entry["stack"]
                assert written.seq == entry["max_tokens"] or written.seq == entry["plan"]["train"]["seq"]
    assert longctx.Plan.load(out).seq == cli["plan"]["train"]["seq"]
    with pytest.raises(longctx.BadInput, match="cannot read"):
        longctx.Plan.load(tmp_path / "missing.json")


def test_a_plans_repr_shows_its_micro_batch_and_its_exports_are_asked_of_the_planner():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=1024, no_search=True, techniques="none", micro_batch=2)
    assert "micro_batch=2" in repr(plan)
    assert "exports" not in json.loads(plan.to_json())  # the answer's, not the plan file's
    again = longctx.Plan.from_json(plan.to_json())
    assert again.exportable_by == plan.exportable_by and again.exports == plan.exports


def test_a_plan_is_saved_as_the_cli_writes_files(tmp_path):
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", budget="64MiB")
    # Through a symbolic link to the file it names, the link kept (it was replaced by a file).
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target.name)
    plan.save(link)
    assert link.is_symlink() and longctx.Plan.load(target).to_json() == plan.to_json()
    # A folder, a device or a FIFO is refused, never replaced by a regular file.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for place in (tmp_path, fifo, "/dev/null"):
        with pytest.raises(longctx.BadInput) as e:
            plan.save(place)
        assert e.value.field == "path"
    assert pathlib.Path("/dev/null").is_char_device() and fifo.is_fifo()
    with pytest.raises(longctx.BadInput):
        plan.save("plan\x00.json")
    # Threads saving one name each write a file of their own and leave it whole.
    import threading
    other = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="4K", budget="64MiB")
    same = tmp_path / "same.json"
    errors = []

    def save(p):
        try:
            for _ in range(20):
                p.save(same)
        except Exception as err:  # noqa: BLE001 - any error fails the test below
            errors.append(err)

    threads = [threading.Thread(target=save, args=(p,)) for p in (plan, other, plan, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert longctx.Plan.load(same).to_json() in (plan.to_json(), other.to_json())
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_errors_survive_pickling_as_process_pools_send_them():
    import multiprocessing
    import pickle
    error = longctx.BadInput("gpus", "0 is not a GPU count")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is longctx.BadInput and again == error and str(again) == str(error)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(longctx.BadInput) as e:
            pool.apply(longctx.max_context, ("tiny-gqa",), {"gpus": 0, "gpu": "cpu"})
    assert e.value.field == "--gpus"


def test_negated_switches_take_true_or_false_only():
    for keyword in ("hf_use_cache", "hf_attention_mask"):
        for value in ("false", "no", 0, 1):
            with pytest.raises(longctx.BadInput) as e:
                longctx.plan("llama-3.2-1b", gpus=1, seq="4K", stack="hf", **{keyword: value})
            assert e.value.field == keyword
    on = longctx.plan("llama-3.2-1b", gpus=1, seq="4K", stack="hf", hf_use_cache=True)
    off = longctx.plan("llama-3.2-1b", gpus=1, seq="4K", stack="hf", hf_use_cache=False)
    assert on.data["train"]["stack"]["use_cache"] is True and off.data["train"]["stack"]["use_cache"] is False


def test_a_plan_without_its_prediction_still_has_a_repr():
    data = json.loads(longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", budget="64MiB").to_json())
    del data["prediction"]
    plan = longctx.Plan.from_json(data)
    assert "no prediction recorded" in repr(plan)
    assert "Plan(" in repr(longctx.Plan({}))


def test_a_plan_read_with_an_edited_prediction_says_so():
    data = json.loads(longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", budget="64MiB").to_json())
    with warnings_caught() as caught:
        longctx.Plan.from_json(data)
    assert caught == []
    data["prediction"]["peak_device_bytes"] = 1
    with pytest.warns(UserWarning, match="peak_device_bytes: the plan says 1 B"):
        edited = longctx.Plan.from_json(data)
    assert edited.prediction.peak_device_bytes == 1  # the file's, as read


def warnings_caught():
    import warnings
    context = warnings.catch_warnings(record=True)

    class Caught:
        def __enter__(self):
            self.records = context.__enter__()
            warnings.simplefilter("always")
            return self.records

        def __exit__(self, *exc):
            return context.__exit__(*exc)

    return Caught()


def test_paths_are_read_as_the_cli_reads_them(tmp_path):
    """A plan's path and a trace's take a str or a PathLike; anything else, a NUL (C++ would
    read up to it: another file), a FIFO (never waited on), a device (never read) or bytes that
    are not UTF-8 raise BadInput naming the argument."""
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", budget="64MiB")
    saved = tmp_path / "p.json"
    plan.save(saved)
    assert longctx.Plan.load(saved).data == longctx.Plan.load(str(saved)).data
    for bad in (None, 3, b"\xff/p.json".decode("utf-8", "surrogateescape"), f"{saved}\x00junk"):
        with pytest.raises(longctx.BadInput):
            longctx.Plan.load(bad)
        with pytest.raises(longctx.BadInput):
            plan.save(bad)
        with pytest.raises(longctx.BadInput):
            longctx.compare(plan, bad)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(longctx.BadInput, match="FIFO"):
        longctx.Plan.load(fifo)
    with pytest.raises(longctx.BadInput):
        longctx.Plan.load("/dev/zero")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"model": "\xe9"}')
    with pytest.raises(longctx.BadInput, match="UTF-8"):
        longctx.Plan.load(latin)
    with pytest.raises(longctx.BadInput):
        longctx.Plan.from_json({"model": object()})


def test_a_plan_without_its_prediction_predicts_as_the_planner_does():
    """A plan file may leave out its prediction (or hold null): .prediction is then the
    planner's, the one `plan` recorded."""
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", budget="64MiB")
    for missing in ("absent", None):
        data = json.loads(plan.to_json())
        if missing == "absent":
            del data["prediction"]
        else:
            data["prediction"] = None
        read = longctx.Plan.from_json(data)
        assert read.prediction.peak_device_bytes == plan.prediction.peak_device_bytes
        assert read.prediction.phases == plan.prediction.phases


# What the CLI reads, writes and refuses, the Python API reads, writes and refuses alike.


def cli_run(*args):
    """The CLI's exit status, standard output and standard error for `args`."""
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    done = subprocess.run([CLI, *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def cli_error(*args):
    """The message of the error the CLI refuses `args` with (after "longctx: error: FIELD: ")."""
    status, _, err = cli_run(*args)
    assert status == 2, err
    return err.splitlines()[0].split(": ", 3)[-1]


def test_max_contexts_plan_is_the_file_max_context_o_writes(tmp_path):
    """max_context's plan records the prediction per phase, as `max-context -o` writes it (and
    as every stack's plan file beside it with --stack all): the Trainer callback's predicted
    peaks and Plan.save's file are not empty."""
    answer = longctx.max_context("tiny-gqa", gpus=2, gpu="cpu", stack="all", ladder=False)
    phases = answer.plan.prediction.phases
    assert phases
    # What the Trainer callback holds each phase to: the plan's, not 0.
    hf = pytest.importorskip("longctx.hf")
    assert all(peak > 0 for peak in hf.predicted_phase_peaks(answer.plan).values())
    # The planner's own per-phase prediction of the same plan.
    planned = {k: v for k, v in json.loads(answer.plan.to_json()).items() if k != "prediction"}
    assert phases == longctx.Plan.from_json(planned).prediction.phases
    saved = tmp_path / "saved.json"
    answer.plan.save(saved)
    assert json.loads(saved.read_text())["prediction"]["phases"] == phases
    out = tmp_path / "plan.json"
    cli_run("max-context", "--model", "tiny-gqa", "--gpus", "2", "--gpu", "cpu", "--stack", "all", "--no-ladder",
            "-o", str(out))
    assert json.loads(answer.plan.to_json()) == json.loads(out.read_text())
    for stack, mine in answer.stacks.items():
        if stack != "longctx" and isinstance(mine, longctx.MaxContext):
            assert json.loads(mine.plan.to_json()) == json.loads((tmp_path / f"plan.{stack}.json").read_text())


def test_what_positions_need_is_said_by_every_plan():
    """`positions` (what positions past max_position_embeddings need) is MaxContext.positions and
    Plan.positions, of a plan from max_context, from plan or read back from its file."""
    short = dict(TINY, max_position_embeddings=512)
    answer = longctx.max_context(short, gpus=1, gpu="cpu", ladder=False)
    assert answer.max_tokens > 512 and "max_position_embeddings of 512" in answer.positions
    assert answer.plan.positions == answer.positions == answer.plan.data["positions"]
    assert longctx.Plan.from_json(answer.plan.to_json()).positions == answer.positions
    past = longctx.plan(short, gpus=1, gpu="cpu", seq=1024, no_search=True)
    assert past.positions == past.data["positions"] and "1,024 tokens" in past.positions
    assert longctx.plan(short, gpus=1, gpu="cpu", seq=512, no_search=True).positions == ""


def test_plan_text_is_read_by_the_planner_as_the_cli_reads_a_file(tmp_path):
    """A key given twice is refused (json.loads kept the last), a UTF-8 byte order mark is
    read, and text past the CLI's 64 MiB bound is refused as Plan.load refuses the file."""
    text = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True).to_json()
    twice = text.replace('"parallel": {', '"parallel": {\n    "sharding": "zero3",', 1)
    path = tmp_path / "twice.json"
    path.write_text(twice)
    for read in (lambda: longctx.Plan.from_json(twice), lambda: longctx.Plan.from_json(twice.encode()),
                 lambda: longctx.Plan.load(path)):
        with pytest.raises(longctx.BadInput, match="parallel.sharding is given twice") as e:
            read()
        assert e.value.field == "plan"
    if CLI:
        assert "parallel.sharding is given twice" in cli_error("explain", str(path))
    marked = tmp_path / "bom.json"
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert longctx.Plan.load(marked).to_json() == text == longctx.Plan.from_json("\ufeff" + text).to_json()
    if CLI:
        assert cli_run("explain", str(marked))[0] == 0
    # Any Mapping reads as its dict does.
    assert longctx.Plan.from_json(types.MappingProxyType(json.loads(text))).to_json() == text
    big = text[:text.rindex("}")] + ', "search": "' + "a" * (64 << 20) + '"}'
    with pytest.raises(longctx.BadInput, match="64 MiB") as e:
        longctx.Plan.from_json(big)
    assert e.value.field == "plan"


def test_keys_derived_from_the_plan_are_worked_out_again_when_read():
    """`exports` and `positions` in a file or a dict were written for the plan as it was: read
    back, they are ignored (docs/robustness.md) and worked out for the plan as it is."""
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True)
    data = json.loads(plan.to_json())
    data["exports"] = [{"stack": "deepspeed", "exports": False, "field": "x", "refusal": "stale"}]
    data["positions"] = "stale"
    for read in (longctx.Plan.from_json(data), longctx.Plan.from_json(json.dumps(data))):
        assert read.exports == plan.exports and read.exportable_by == plan.exportable_by
        assert read.positions == "" and "positions" not in read.data


@pytest.mark.parametrize("keywords", [{"ulyses": 2}, {"offload_optimiser": True}, {"ladder": True},
                                      {"\udc80": "x"}])
def test_a_misspelt_keyword_is_named_as_the_planner_names_it(keywords):
    with pytest.raises(longctx.BadInput) as e:
        longctx.plan("tiny-gqa", gpus=2, gpu="cpu", seq=1024, **keywords)
    assert e.value.field == ascii(next(iter(keywords)))[1:-1]
    assert e.value.message.startswith("is neither a knob nor a setting; the knobs are sharding, ulysses")
    if "ladder" not in keywords:  # max_context's own keyword
        with pytest.raises(longctx.BadInput) as e:
            longctx.max_context("tiny-gqa", gpus=2, gpu="cpu", **keywords)
        assert e.value.field == ascii(next(iter(keywords)))[1:-1]


def test_a_model_folders_config_json_that_is_no_file_is_named_as_the_cli_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, make in [("fifo", os.mkfifo), ("folder", os.mkdir),
                       ("loop", lambda p: os.symlink("config.json", p)),
                       ("dangling", lambda p: os.symlink("nowhere.json", p)),
                       ("device", lambda p: os.symlink("/dev/null", p))]:
        os.mkdir(name)
        make(os.path.join(name, "config.json"))
        with pytest.raises(longctx.BadInput) as e:
            longctx.model_config(name)
        assert e.value.field == "--model" and "holds no config.json" not in e.value.message
        if CLI:
            assert e.value.message == cli_error("plan", "--model", name, "--gpus", "1", "--seq", "1K")
    os.mkdir("empty")
    with pytest.raises(longctx.BadInput, match="holds no config.json"):
        longctx.model_config("empty")


def test_a_config_read_from_a_relative_folder_is_sourced_as_the_cli_sources_it(tmp_path, monkeypatch):
    """A PretrainedConfig (or a dict) from a relative folder is named after the folder and
    sourced by its absolute path, as `--model FOLDER` is: launch.sh loads it from anywhere."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    os.mkdir("tiny")
    pathlib.Path("tiny/config.json").write_text(json.dumps(TINY))
    config = transformers.AutoConfig.from_pretrained("tiny")
    absolute = str(tmp_path / "tiny")
    for model in (config, dict(TINY, _name_or_path="tiny")):
        plan = longctx.plan(model, gpus=1, gpu="h100-80gb", seq=1024, stack="hf", no_search=True)
        assert plan.data["model"]["name"] == "tiny" and plan.data["model"]["_name_or_path"] == absolute
        assert f"MODEL_OF_PLAN='{absolute}'" in plan.export("hf")["launch.sh"]
    if CLI:
        cli = cli_json("plan", "--model", "tiny", "--gpus", "1", "--seq", "1K", "--stack", "hf", "--no-search")
        assert (cli["model"]["name"], cli["model"]["_name_or_path"]) == ("tiny", absolute)


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def test_content_json_cannot_hold_raises_bad_input_naming_the_argument():
    """Nesting past Python's recursion limit, a dict holding itself and a key that is no text
    raise BadInput naming the model or the plan, never json's own errors."""
    data = json.loads(longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True).to_json())
    for field, call in [("model", longctx.model_config), ("plan", longctx.Plan.from_json)]:
        base = TINY if field == "model" else data
        circular = dict(base)
        circular["me"] = circular
        for bad in (dict(base, junk=_nested(5000)), circular, dict(base, **{"x": {(1, 2): 1}})):
            with pytest.raises(longctx.BadInput) as e:
                call(bad)
            assert e.value.field == field


def test_numpy_numbers_in_a_config_or_a_plan_are_numbers():
    numpy = pytest.importorskip("numpy")
    config = dict(TINY, hidden_size=numpy.int64(64), num_hidden_layers=numpy.int32(2),
                  rope_theta=numpy.float32(10000.0), tie_word_embeddings=numpy.bool_(False))
    assert longctx.model_config(config) == longctx.model_config(dict(TINY, rope_theta=10000.0))
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq=512, no_search=True)
    data = json.loads(plan.to_json())
    data["train"]["micro_batch"] = numpy.int64(data["train"]["micro_batch"])
    assert longctx.Plan.from_json(data).to_json() == plan.to_json()


def test_values_are_held_to_the_clis_value_rules():
    """Spaces around a value and control characters are refused as the CLI refuses them
    (cli/common/parse_values.h); a message never carries a control character raw; a torch
    bool is no count."""
    refused = [("seq", "--seq", dict(seq="1024 ")), ("budget", "--budget", dict(budget="512MiB ")),
               ("host_mem", "--host-mem", dict(host_mem=" 1GiB")), ("sharding", "--sharding", dict(sharding="zero3 ")),
               ("dtype", "--dtype", dict(dtype="bf16\t")), ("gpu", "--gpu", dict(gpu="cpu\x1b[31m"))]
    for field, flag, keywords in refused:
        with pytest.raises(longctx.BadInput) as e:
            longctx.plan(**{"model": "tiny-gqa", "gpus": 1, "gpu": "cpu", "seq": "1K", **keywords})
        assert e.value.field == field and "\x1b" not in e.value.message
        if CLI:
            assert e.value.message == cli_error("plan", "--model", "tiny-gqa", "--gpus", "1", "--seq", "1K", "--gpu", "cpu",
                                                flag, keywords[field])
    with pytest.raises(longctx.BadInput) as e:  # a name the planner echoes: escaped as the CLI prints it
        longctx.model_config("no-such-model\x1b[31m")
    assert "\x1b" not in e.value.message and "\\x1B[31m" in e.value.message
    torch = pytest.importorskip("torch")
    with pytest.raises(longctx.BadInput) as e:
        longctx.plan("tiny-gqa", gpus=torch.tensor(True), gpu="cpu", seq="1K")
    assert e.value.field == "gpus"
    assert longctx.plan("tiny-gqa", gpus=torch.tensor(1), gpu="cpu", seq="1K", no_search=True).data["cluster"]["gpus"] == 1


def test_exporting_a_plan_that_does_not_fit_says_so(tmp_path):
    """As `longctx export` prints a note on stderr (and exits 3), Plan.export warns."""
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="64K", budget="16MiB", no_search=True)
    assert not plan.prediction.feasible
    with pytest.warns(UserWarning, match="note: the plan does not fit: device memory binds") as caught:
        plan.export("deepspeed")
    if CLI:
        path = tmp_path / "p.json"
        plan.save(path)
        status, _, err = cli_run("export", str(path), "--stack", "deepspeed")
        assert status == 3 and err.splitlines()[0] in [str(w.message) for w in caught]
    with warnings_caught() as fits:
        longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="2K", budget="64MiB").export("deepspeed")
    assert not [w for w in fits if "does not fit" in str(w.message)]


def test_explain_takes_the_rows_explain_live_takes():
    plan = longctx.plan("tiny-gqa", gpus=1, gpu="cpu", seq="1K", no_search=True)
    assert plan.explain(0) and plan.explain((1 << 31) - 1) == plan.explain(1 << 21)
    for rows in (-1, 1 << 31):
        with pytest.raises(longctx.BadInput) as e:
            plan.explain(rows)
        assert e.value.field == "live_rows"
