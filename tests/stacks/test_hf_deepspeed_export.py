"""`longctx export --stack hf` of a plan the hf stack made under DeepSpeed ZeRO-3 (one GPU, or
Ulysses across GPUs): the files are those of Hugging Face's own Ulysses setup, read by each
library's own code. accelerate's config (PyYAML and accelerate's ClusterConfig) has
distributed_type DEEPSPEED, the DeepSpeed config file and parallelism_config's sp keys, which
accelerate's launcher turns into the environment its ParallelismConfig reads; ds_config.json,
its "auto" values filled by transformers' TrainingArguments as the Trainer does, is read by
DeepSpeed's own DeepSpeedConfig, whose bucket sizes are the defaults the plan booked."""
import json
import os
import subprocess
import sys

import pytest
import yaml

CLI = os.environ.get("LONGCTX_CLI")

# Qwen3-8B over 4 H100s, Ulysses 4, the optimizer offloaded, as the HF Ulysses guide runs Qwen3.
ULYSSES = ["--stack", "hf", "--model", "qwen3-8b", "--gpus", "4", "--gpu", "h100-80gb", "--seq", "32768", "--no-search",
           "--attention", "flash_attention_2", "--sharding", "zero3", "--ulysses", "4", "--checkpoint", "full",
           "--offload-optimizer"]

# TrainingArguments fills ds_config.json's "auto" values (HfTrainerDeepSpeedConfig.trainer_config_process)
# in a process of its own: it turns DeepSpeed on process-wide.
FILL_AUTO = """
import json, sys
import transformers
args = json.load(open("training_args.json"))
args["deepspeed"] = json.load(open("ds_config.json"))
built = transformers.TrainingArguments(**args, use_cpu=True, report_to=[])
print(json.dumps(built.hf_deepspeed_config.config))
"""


def cli(*args, check=True):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    return subprocess.run([CLI, *args], check=check, capture_output=True, text=True)


def exported(tmp_path, plan_args, name):
    plan = tmp_path / f"{name}.json"
    cli("plan", *plan_args, "-o", str(plan))
    out = tmp_path / name
    cli("export", str(plan), "--stack", "hf", "-o", str(out) + "/")
    return json.loads(plan.read_text()), out


def test_ulysses_plan_exports_the_guides_accelerate_deepspeed_config(tmp_path, monkeypatch, accelerate_launch_env):
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    parallelism = pytest.importorskip("accelerate.parallelism_config")
    _, out = exported(tmp_path, ULYSSES, "ulysses")
    assert sorted(p.name for p in out.iterdir()) == ["accelerate_config.yaml", "ds_config.json", "launch.sh",
                                                     "training_args.json"]
    accel = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert accel["distributed_type"] == "DEEPSPEED" and accel["num_processes"] == 4
    assert accel["deepspeed_config"]["deepspeed_config_file"] == "ds_config.json"
    sp = accel["parallelism_config"]
    assert (sp["parallelism_config_sp_size"], sp["parallelism_config_sp_backend"]) == (4, "deepspeed")
    assert sp["parallelism_config_sp_attn_implementation"] == "flash_attention_2"
    assert config_args.ClusterConfig.from_yaml_file(str(out / "accelerate_config.yaml")).distributed_type == "DEEPSPEED"
    # What `accelerate launch` gives each rank, and accelerate's ParallelismConfig built from it.
    _, env = accelerate_launch_env(out)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true" and env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_config.json"
    for key, value in env.items():
        if key.startswith("PARALLELISM_CONFIG_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    pc = parallelism.ParallelismConfig()
    assert (pc.sp_size, pc.sp_backend) == (4, "deepspeed")
    assert pc.sp_handler.sp_attn_implementation == "flash_attention_2"


def test_ulysses_over_part_of_the_world_names_the_replicas_deepspeed_counts(tmp_path, monkeypatch,
                                                                            accelerate_launch_env):
    """Ulysses 4 on 8 GPUs: accelerate sets DeepSpeed's train_batch_size from its
    ParallelismConfig's data-parallel size (accelerator.py _prepare_deepspeed), which DeepSpeed
    holds to micro-batch x accumulation x world / sequence-parallel size (runtime/config.py
    _batch_assertion): the config must name the two replicas."""
    parallelism = pytest.importorskip("accelerate.parallelism_config")
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    ds_comm = pytest.importorskip("deepspeed.comm")
    args = ULYSSES.copy()
    args[args.index("--gpus") + 1] = "8"
    plan, out = exported(tmp_path, args, "replicas")
    _, env = accelerate_launch_env(out)
    for key, value in env.items():
        if key.startswith("PARALLELISM_CONFIG_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    pc = parallelism.ParallelismConfig()
    assert (pc.sp_size, pc.data_parallel_size) == (4, 2)
    run = subprocess.run([sys.executable, "-c", FILL_AUTO], cwd=out, check=True, capture_output=True, text=True)
    filled = json.loads(run.stdout.splitlines()[-1])
    micro, accumulation = filled["train_micro_batch_size_per_gpu"], filled["gradient_accumulation_steps"]
    filled["train_batch_size"] = micro * accumulation * pc.data_parallel_size  # as accelerate sets it

    class UlyssesGroups:  # deepspeed/runtime/sequence_parallel/parallel_state_sp.py: the sp size only
        def get_sequence_parallel_world_size(self):
            return pc.sp_size

    monkeypatch.setattr(ds_comm, "get_world_size", lambda *a, **k: plan["cluster"]["gpus"])
    monkeypatch.setattr(ds_comm, "get_rank", lambda *a, **k: 0)
    config = ds_config.DeepSpeedConfig(filled, mpu=UlyssesGroups())  # asserts the batch arithmetic
    assert config.world_size == 2


def test_ulysses_plans_ds_config_is_read_by_deepspeed_with_the_booked_buckets(tmp_path):
    pytest.importorskip("transformers")
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    plan, out = exported(tmp_path, ULYSSES, "ulysses")
    raw = json.loads((out / "ds_config.json").read_text())
    assert raw["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert plan["train"]["grad_dtype"] == "bf16"  # DeepSpeed reduces and keeps the parameters' dtype
    run = subprocess.run([sys.executable, "-c", FILL_AUTO], cwd=out, check=True, capture_output=True, text=True)
    filled = json.loads(run.stdout.splitlines()[-1])
    config = ds_config.DeepSpeedConfig(filled)  # its pydantic models and parsers
    assert config.zero_optimization_stage == 3 and config.train_micro_batch_size_per_gpu == 1
    assert config.zero_config.offload_optimizer.device == "cpu"
    assert config.bfloat16_config.enabled
    # The data-parallel world DeepSpeed derives from it (runtime/config.py, sequence_parallel_size).
    assert filled["sequence_parallel_size"] == 4
    # The buckets the plan booked (footprint/deepspeed.h): DeepSpeed's defaults, no "auto" for
    # accelerate to replace with hidden-size ones.
    assert config.zero_config.reduce_bucket_size == 500_000_000
    assert config.zero_config.param_persistence_threshold == 100_000


def test_one_gpu_zero3_plan_exports_deepspeed_not_a_bare_process(tmp_path):
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    _, out = exported(tmp_path, ["--stack", "hf", "--model", "llama-3.2-1b", "--gpus", "1", "--gpu", "h100-80gb",
                                 "--seq", "8192", "--no-search", "--attention", "flash_attention_2", "--sharding",
                                 "zero3", "--checkpoint", "full", "--offload-optimizer"], "one")
    accel = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert accel["distributed_type"] == "DEEPSPEED" and accel["num_processes"] == 1
    assert "parallelism_config" not in accel
    assert config_args.ClusterConfig.from_yaml_file(str(out / "accelerate_config.yaml")).num_processes == 1
    assert "--deepspeed_config_file" in (out / "launch.sh").read_text()
