"""`longctx export`: the files each training stack gets hold only keys that stack's own config
schema defines, construct its objects where they are installed (transformers.TrainingArguments,
accelerate's config file, DeepSpeed's pydantic models), and carry the plan's knobs."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

import longctx

CLI = os.environ.get("LONGCTX_CLI")
# The keys DeepSpeed and ArcticTraining define, read from their source at the commits recorded
# inside (tests/python/data/extract_stack_keys.py regenerates it).
KEYS = json.loads((pathlib.Path(__file__).parent / "data" / "stack_keys.json").read_text())
DS_KEYS = KEYS["deepspeed"]
ARCTIC_KEYS = KEYS["arctic_training"]

SEQ = 65536


def cli(*args, check=True):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    return subprocess.run([CLI, *args], check=check, capture_output=True, text=True)


def make_plan(tmp_path, *knobs, name="plan.json"):
    path = tmp_path / name
    # A budget large enough that every knob combination below fits: the files, not the fit, are tested.
    cli("plan", "--model", "llama-3.2-1b", "--gpus", "8", "--seq", str(SEQ), "--no-search", "--budget", "1TiB", "-o",
        str(path), *knobs)
    return path


def export(plan_path, stack, out):
    run = cli("export", str(plan_path), "--stack", stack, "-o", str(out))
    return run


# ZeRO-3 with everything offloaded, Ulysses 4, full checkpointing offloaded, tiled loss.
LONG = ["--sharding", "zero3", "--offload-optimizer", "--offload-params", "--ulysses", "4", "--checkpoint", "full",
        "--offload-checkpoints"]


def check_deepspeed_keys(ds):
    assert set(ds) <= set(DS_KEYS["top_level"]), set(ds) - set(DS_KEYS["top_level"])
    zero = ds["zero_optimization"]
    assert set(zero) <= set(DS_KEYS["zero_optimization"])
    for section in ("offload_param", "offload_optimizer"):
        if section in zero:
            assert set(zero[section]) <= set(DS_KEYS[section])
    if "activation_checkpointing" in ds:
        assert set(ds["activation_checkpointing"]) <= set(DS_KEYS["activation_checkpointing"])


def test_deepspeed_config_holds_the_plan_in_deepspeeds_keys(tmp_path):
    out = tmp_path / "ds.json"
    export(make_plan(tmp_path, *LONG), "deepspeed", out)
    ds = json.loads(out.read_text())
    check_deepspeed_keys(ds)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert ds["sequence_parallel_size"] == 4
    assert ds["activation_checkpointing"]["cpu_checkpointing"] is True
    assert ds["bf16"] == {"enabled": True}


def test_deepspeed_config_is_read_by_deepspeed_itself(tmp_path):
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    out = tmp_path / "ds.json"
    export(make_plan(tmp_path, *LONG, "--grad-dtype", "bf16"), "deepspeed", out)
    config = ds_config.DeepSpeedConfig(json.loads(out.read_text()))  # its pydantic models and parsers
    assert config.zero_optimization_stage == 3 and config.train_micro_batch_size_per_gpu == 1
    assert config.zero_config.offload_param.device == "cpu" and config.zero_config.offload_optimizer.pin_memory
    assert config.activation_checkpointing_config.cpu_checkpointing
    assert str(config.grad_accum_dtype) == "bf16" and config.gradient_clipping == 1.0


def test_arctic_recipe_keys_exist_in_arctic_training(tmp_path):
    out = tmp_path / "recipe.yaml"
    run = export(make_plan(tmp_path, *LONG, "--mlp-tiles", "4", "--loss-tiles", "8"), "arctic", out)
    recipe = yaml.safe_load(out.read_text())
    assert set(recipe) <= set(ARCTIC_KEYS["TrainerConfig"]), set(recipe) - set(ARCTIC_KEYS["TrainerConfig"])
    assert set(recipe["model"]) <= set(ARCTIC_KEYS["ModelConfig"])
    assert set(recipe["data"]) <= set(ARCTIC_KEYS["DataConfig"]) | set(ARCTIC_KEYS["SFTDataConfig"])
    assert set(recipe["optimizer"]) <= set(ARCTIC_KEYS["OptimizerConfig"])
    assert recipe["type"] in ARCTIC_KEYS["trainers"]
    assert recipe["model"]["type"] == "liger" and "liger" in ARCTIC_KEYS["model_factories"]
    assert recipe["optimizer"]["type"] == "cpu_adam" and "cpu_adam" in ARCTIC_KEYS["optimizer_factories"]
    assert recipe["sequence_parallel_size"] == 4 and recipe["data"]["max_length"] == SEQ
    # The collator pads each batch to a multiple of div_length (256 unless set): the plan's
    # padding multiple, Ulysses' degree, so no batch is longer than the plan's padded length.
    assert recipe["data"]["div_length"] == 4
    assert recipe["tiled_mlp_compute"] is True and recipe["activation_checkpoint_cpu_offload"] is True
    check_deepspeed_keys(recipe["deepspeed"])
    # Liger's own loss chunks and ArcticTraining's own MLP shard count are approximations.
    assert "approximation: parallel.loss_tiles" in run.stderr
    assert "approximation: parallel.mlp_tiles" in run.stderr


# Builds transformers.TrainingArguments from training_args.json in the working folder (with
# its DeepSpeed config when deepspeed is installed) and prints what it holds as JSON.
CONSTRUCT_TRAINING_ARGUMENTS = """
import json
import transformers
args = json.load(open("training_args.json"))
try:
    import deepspeed  # noqa: F401
except ImportError:
    args.pop("deepspeed", None)
import os
os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "true"  # as `accelerate launch` sets it from its config
# On this machine's CPU unless the file says otherwise (a CPU plan's says so itself).
built = transformers.TrainingArguments(**({"use_cpu": True} | args), report_to=[])
ds = built.hf_deepspeed_config.config if built.deepspeed else None
print(json.dumps({k: getattr(built, k) for k in ("gradient_checkpointing", "gradient_checkpointing_kwargs",
                  "per_device_train_batch_size", "bf16", "deepspeed", "fsdp_config", "use_cpu")} | {"ds": ds}
                 | {"cpu_ram_efficient_loading": os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"]}))
"""


def construct_training_arguments(folder):
    pytest.importorskip("transformers")
    run = subprocess.run([sys.executable, "-c", CONSTRUCT_TRAINING_ARGUMENTS], cwd=folder, check=True,
                         capture_output=True, text=True)
    return json.loads(run.stdout.splitlines()[-1])


def test_hf_training_arguments_construct_and_accelerate_reads_its_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    out = tmp_path / "hf"
    export(make_plan(tmp_path, "--sharding", "zero2", "--offload-optimizer", "--checkpoint", "every:2"), "hf", out)
    assert sorted(p.name for p in out.iterdir()) == ["accelerate_config.yaml", "ds_config.json", "launch.sh",
                                                     "training_args.json"]
    args = json.loads((out / "training_args.json").read_text())
    ds = json.loads((out / "ds_config.json").read_text())
    # The config itself, not a path the Trainer would open from the folder it runs in.
    assert args["deepspeed"] == ds and args["gradient_checkpointing"] is True
    check_deepspeed_keys(ds)
    assert ds["zero_optimization"]["stage"] == 2 and ds["train_micro_batch_size_per_gpu"] == "auto"
    # In a process of its own: with `deepspeed` set, TrainingArguments turns on DeepSpeed
    # process-wide (accelerate's state, the environment), which would leak into other tests.
    built = construct_training_arguments(out)
    assert built["gradient_checkpointing"] and built["gradient_checkpointing_kwargs"] == {"use_reentrant": False}
    assert built["per_device_train_batch_size"] == 1 and built["bf16"]
    if built["deepspeed"]:  # "auto" filled from the arguments
        assert built["ds"]["train_micro_batch_size_per_gpu"] == 1
        assert built["ds"]["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    accel = config_args.ClusterConfig.from_yaml_file(str(out / "accelerate_config.yaml"))
    assert accel.distributed_type == "DEEPSPEED" and accel.num_processes == 8


def test_accelerates_launcher_runs_the_hf_config_as_deepspeed_with_ulysses(tmp_path, accelerate_launch_env):
    out = tmp_path / "hf"
    export(make_plan(tmp_path, "--sharding", "zero3", "--offload-optimizer", "--ulysses", "4", "--checkpoint", "full"),
           "hf", out)
    # What `accelerate launch` does before it starts the ranks: the environment each rank's
    # Accelerator reads.
    args, env = accelerate_launch_env(out)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true" and env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_config.json"
    # The precision is ds_config.json's: the YAML names none, which accelerate would pass on as a
    # DeepSpeed field and DeepSpeedPlugin refuse beside the file (test_launch.py); the
    # launcher's own default stands, and the Trainer's bf16 sets the rank's precision
    # (transformers' TrainingArguments.__post_init__ writes ACCELERATE_MIXED_PRECISION over it).
    assert env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] == "true" and env["ACCELERATE_MIXED_PRECISION"] == "no"
    assert "mixed_precision" not in env.get("ACCELERATE_CONFIG_DS_FIELDS", "")
    assert json.loads((out / "ds_config.json").read_text())["bf16"]["enabled"] is True
    assert env["PARALLELISM_CONFIG_SP_SIZE"] == "4" and env["PARALLELISM_CONFIG_SP_BACKEND"] == "deepspeed"
    assert env["PARALLELISM_CONFIG_SP_SEQ_LENGTH"] == str(SEQ)
    assert args.num_processes == 8


def test_hf_uses_fsdp2_for_plain_zero3(tmp_path):
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    out = tmp_path / "hf"
    # FSDP2's mixed precision reduces fp32 gradients: a plan that keeps them so.
    export(make_plan(tmp_path, "--sharding", "zero3", "--checkpoint", "full", "--grad-dtype", "fp32"), "hf", out)
    assert not (out / "ds_config.json").exists()
    args = json.loads((out / "training_args.json").read_text())
    assert args["fsdp"] == "full_shard" and args["fsdp_config"]["fsdp_version"] == 2
    built = construct_training_arguments(out)
    # FSDP checkpoints the layers itself; the Trainer refuses gradient_checkpointing beside it.
    assert built["fsdp_config"]["version"] == 2 and built["fsdp_config"]["activation_checkpointing"]
    assert not built["gradient_checkpointing"]
    accel = config_args.ClusterConfig.from_yaml_file(str(out / "accelerate_config.yaml"))
    assert accel.distributed_type == "FSDP" and accel.fsdp_config["fsdp_version"] == 2
    # The Trainer's arguments write FSDP_CPU_RAM_EFFICIENT_LOADING over the launcher's: they agree.
    assert accel.fsdp_config["fsdp_cpu_ram_efficient_loading"] is True
    assert built["cpu_ram_efficient_loading"] == "true"


def test_an_hf_stack_plan_exports_transformers_alone(tmp_path):
    """A plan of `--stack hf` predicted one process of transformers with the checkpoint
    implementation it names: its files say exactly that, and no other stack takes it."""
    pytest.importorskip("transformers")
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    plan = tmp_path / "hf_plan.json"
    cli("plan", "--model", "llama-3.2-1b", "--gpus", "1", "--seq", "8192", "--no-search", "--budget", "1TiB", "--stack", "hf",
        "--attention", "eager", "--checkpoint", "full", "--hf-checkpointing", "reentrant", "-o", str(plan))
    out = tmp_path / "hf"
    run = export(plan, "hf", out)
    assert sorted(p.name for p in out.iterdir()) == ["accelerate_config.yaml", "launch.sh", "training_args.json"]
    assert 'attn_implementation="eager"' in run.stdout + run.stderr
    args = json.loads((out / "training_args.json").read_text())
    assert "deepspeed" not in args and args["gradient_checkpointing_kwargs"] == {"use_reentrant": True}
    built = construct_training_arguments(out)
    assert built["gradient_checkpointing"] and built["gradient_checkpointing_kwargs"] == {"use_reentrant": True}
    accel = config_args.ClusterConfig.from_yaml_file(str(out / "accelerate_config.yaml"))
    assert accel.distributed_type == "NO" and accel.num_processes == 1
    for other in ("deepspeed", "arctic"):
        refused = cli("export", str(plan), "--stack", other, check=False)
        assert refused.returncode == 2 and "--stack" in refused.stderr and "train.stack hf" in refused.stderr


def test_a_cpu_plan_exports_to_hf_as_the_one_cpu_process_accelerate_runs(tmp_path, monkeypatch):
    """A plan of the CPU virtual device runs on the CPU even where a GPU is visible: both files
    say use_cpu, which accelerate's launcher hands the rank as ACCELERATE_USE_CPU and the
    Trainer's arguments keep. More ranks, or DeepSpeed, accelerate does not launch on the CPU."""
    pytest.importorskip("transformers")
    launch = pytest.importorskip("accelerate.commands.launch")
    launch_utils = pytest.importorskip("accelerate.utils.launch")
    plan = tmp_path / "cpu.json"
    cli("plan", "--model", "tiny-gqa", "--gpu", "cpu", "--gpus", "1", "--seq", "1K", "--stack", "hf", "-o", str(plan))
    out = tmp_path / "hf"
    export(plan, "hf", out)
    assert json.loads((out / "training_args.json").read_text())["use_cpu"] is True
    assert yaml.safe_load((out / "accelerate_config.yaml").read_text())["use_cpu"] is True
    assert construct_training_arguments(out)["use_cpu"] is True
    monkeypatch.chdir(out)
    args = launch.launch_command_parser().parse_args(["--config_file", "accelerate_config.yaml", "train.py"])
    args, _, _ = launch._validate_launch_command(args)
    assert not (args.use_deepspeed or args.use_fsdp or args.multi_gpu)  # launch_command's simple launcher
    _, env = launch_utils.prepare_simple_launcher_cmd_env(args)
    assert env["ACCELERATE_USE_CPU"] == "True"
    two = tmp_path / "cpu2.json"
    cli("plan", "--model", "tiny-gqa", "--gpu", "cpu", "--gpus", "2", "--seq", "1K", "--stack", "hf", "-o", str(two))
    refused = cli("export", str(two), "--stack", "hf", "-o", str(tmp_path / "hf2"), check=False)
    assert refused.returncode == 2 and "cluster.hardware" in refused.stderr and "--gpus 1" in refused.stderr
    assert not (tmp_path / "hf2").exists()
    # A GPU plan's files leave the device to the machine.
    gpu = json.loads((export(make_plan(tmp_path, name="gpu.json"), "hf", tmp_path / "hfg") and
                      tmp_path / "hfg" / "training_args.json").read_text())
    assert "use_cpu" not in gpu


def test_an_hf_stack_plan_with_trls_loss_exports_an_sft_config_trl_reads(tmp_path):
    """TRL's chunked loss is SFTTrainer's: the plan exports SFTConfig's arguments, which TRL
    itself takes, with the loss and the plan's length (SFTConfig truncates to 1024 otherwise)."""
    trl = pytest.importorskip("trl")
    plan = tmp_path / "trl_plan.json"
    cli("plan", "--model", "llama-3.2-1b", "--gpus", "1", "--gpu", "h100-80gb", "--seq", "65536", "--no-search",
        "--stack", "hf", "--hf-loss", "trl-chunked-nll", "--checkpoint", "full", "--offload-checkpoints", "-o", str(plan))
    out = tmp_path / "trl"
    export(plan, "hf", out)
    assert sorted(p.name for p in out.iterdir()) == ["accelerate_config.yaml", "launch.sh", "sft_config.json"]
    args = json.loads((out / "sft_config.json").read_text())
    args["output_dir"] = str(tmp_path / "run")
    assert args["bf16"] is True
    args["bf16"] = False  # SFTConfig checks bf16 against the machine, which has no GPU here
    config = trl.SFTConfig(**args)
    assert (config.loss_type, config.max_length, config.packing) == ("chunked_nll", 65536, False)
    assert config.gradient_checkpointing and config.gradient_checkpointing_kwargs["offload"] is True


def test_accelerates_checkpointing_moves_to_the_fsdp_config_accelerate_and_trl_read(tmp_path, monkeypatch):
    """An hf-stack plan across GPUs with `--hf-checkpointing accelerate` checkpoints through
    accelerate's fsdp_config: `accelerate launch` hands each rank the FSDP settings, from which
    accelerate's own FSDP plugin checkpoints (and offloads) the layers, while TRL's SFTConfig
    leaves the Trainer's gradient checkpointing off (the Trainer refuses both at once)."""
    trl = pytest.importorskip("trl")
    launch = pytest.importorskip("accelerate.commands.launch")
    launch_utils = pytest.importorskip("accelerate.utils.launch")
    accelerate_utils = pytest.importorskip("accelerate.utils")
    plan = tmp_path / "acc_plan.json"
    cli("plan", "--model", "qwen3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq", "1M", "--no-search", "--stack",
        "hf", "--sharding", "zero3", "--ring", "8", "--hf-loss", "trl-chunked-nll", "--checkpoint", "full",
        "--offload-checkpoints", "--hf-checkpointing", "accelerate", "-o", str(plan))
    out = tmp_path / "acc"
    export(plan, "hf", str(out) + "/")
    monkeypatch.chdir(out)
    args = launch.launch_command_parser().parse_args(["--config_file", "accelerate_config.yaml", "train.py"])
    args, _, _ = launch._validate_launch_command(args)
    env = launch_utils.prepare_multi_gpu_env(args)
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    fsdp = accelerate_utils.FullyShardedDataParallelPlugin()
    assert fsdp.fsdp_version == 2 and fsdp.activation_checkpointing and fsdp.activation_checkpointing_offload
    args = json.loads((out / "sft_config.json").read_text())
    args["output_dir"] = str(tmp_path / "run")
    args["bf16"] = False  # SFTConfig checks bf16 against the machine, which has no GPU here
    config = trl.SFTConfig(**args)
    assert not config.gradient_checkpointing and "offload" not in (config.gradient_checkpointing_kwargs or {})


def test_an_arctic_stack_plan_exports_the_recipe_it_predicted(tmp_path):
    """A plan of `--stack arctic` predicted ArcticTraining with its model type and attention:
    its recipe says exactly that, approximates nothing, and no other stack takes it."""
    plan = tmp_path / "arctic_plan.json"
    cli("plan", "--model", "llama-3.1-8b", "--gpus", "8", "--seq", "262144", "--no-search", "--stack", "arctic",
        "--attention", "flash_attention_3", "--ulysses", "8", "--checkpoint", "full", "--offload-checkpoints",
        "--offload-optimizer", "-o", str(plan))
    out = tmp_path / "recipe.yaml"
    run = export(plan, "arctic", out)
    recipe = yaml.safe_load(out.read_text())
    assert set(recipe["model"]) <= set(ARCTIC_KEYS["ModelConfig"])
    assert recipe["model"]["type"] == "liger" and recipe["model"]["attn_implementation"] == "flash_attention_3"
    assert recipe["sequence_parallel_size"] == 8 and recipe["activation_checkpoint_cpu_offload"] is True
    assert "approximation" not in run.stderr
    check_deepspeed_keys(recipe["deepspeed"])
    for other in ("deepspeed", "hf"):
        refused = cli("export", str(plan), "--stack", other, check=False)
        assert refused.returncode == 2 and "train.stack arctic" in refused.stderr


def test_knobs_a_stack_cannot_run_exit_2_naming_knob_and_stack(tmp_path):
    plan = make_plan(tmp_path, "--ulysses", "2", "--head-chunk", "4")
    for stack in ("arctic", "hf", "deepspeed"):
        run = cli("export", str(plan), "--stack", stack, check=False)
        assert run.returncode == 2
        assert "parallel.head_chunk" in run.stderr and f"--stack {stack}" in run.stderr
    offload = make_plan(tmp_path, "--checkpoint", "full", "--offload-checkpoints", name="offload.json")
    run = cli("export", str(offload), "--stack", "hf", check=False)
    assert run.returncode == 2 and "parallel.offload_checkpoints" in run.stderr
    assert cli("export", str(offload), "--stack", "megatron", check=False).returncode == 2


def test_the_python_package_exports_what_the_cli_writes(tmp_path):
    plan_path = make_plan(tmp_path, *LONG)
    out = tmp_path / "arctic.yaml"
    export(plan_path, "arctic", out)
    plan = longctx.Plan.from_json(plan_path.read_text())
    with pytest.warns(UserWarning, match="approximation: parallel.loss_tiles"):
        files = plan.export("arctic")
    assert sorted(files) == ["arctic_recipe.yaml", "launch.sh"] and files["arctic_recipe.yaml"] == out.read_text()
    with pytest.raises(longctx.BadInput, match="stack"):
        plan.export("megatron")


def test_without_output_the_files_are_printed_under_their_names(tmp_path):
    plan = make_plan(tmp_path, "--sharding", "zero2")
    printed = cli("export", str(plan), "--stack", "hf").stdout
    for name in ("accelerate_config.yaml", "ds_config.json", "training_args.json"):
        assert f"==> {name} <==\n" in printed
    alone = cli("export", str(plan), "--stack", "deepspeed").stdout
    assert json.loads(alone)["zero_optimization"]["stage"] == 2  # one file: its text alone
    missing = cli("export", str(plan), "--stack", "deepspeed", "-o", str(tmp_path / "no" / "such" / "ds.json"), check=False)
    assert missing.returncode == 2 and "-o" in missing.stderr
    # A path ending in '/' asks for a folder, made if missing, even for a one-file stack.
    cli("export", str(plan), "--stack", "deepspeed", "-o", str(tmp_path / "fresh") + "/")
    assert json.loads((tmp_path / "fresh" / "ds_config.json").read_text())["zero_optimization"]["stage"] == 2


def read_torchtitan_job(path):
    """torchtitan's own ConfigManager reads the job file (it refuses any key JobConfig lacks)."""
    config = pytest.importorskip("torchtitan.config")
    return config.ConfigManager().parse_args(["--job.config_file", str(path)])


def test_a_torchtitan_plan_exports_a_job_torchtitan_reads(tmp_path):
    plan = tmp_path / "tt.json"
    cli("plan", "--stack", "torchtitan", "--model", "llama-3.1-8b", "--gpus", "1", "--gpu", "h100-80gb", "--dtype", "fp32",
        "--seq", "4096",
        "--checkpoint", "every:3", "--no-search", "--budget", "1TiB", "-o", str(plan))
    out = tmp_path / "job.toml"
    run = export(plan, "torchtitan", out)
    assert "approximation" not in run.stderr
    job = read_torchtitan_job(out)
    assert (job.model.name, job.model.flavor) == ("llama3", "8B")
    assert (job.training.seq_len, job.training.local_batch_size) == (4096, 1)
    assert job.training.mixed_precision_param == "float32"
    assert (job.activation_checkpoint.mode, job.activation_checkpoint.selective_ac_option) == ("selective", "3")
    assert (job.optimizer.name, job.optimizer.implementation) == ("AdamW", "fused")
    # Its plan is torchtitan's step: the other stacks' files would run another one.
    for stack in ("arctic", "hf", "deepspeed"):
        refused = cli("export", str(plan), "--stack", stack, check=False)
        assert refused.returncode == 2 and "--stack" in refused.stderr


def test_a_torchtitan_fsdp2_plan_exports_its_sharding_and_param_dtype(tmp_path):
    plan = tmp_path / "tt8.json"
    cli("plan", "--stack", "torchtitan", "--model", "llama-3.1-70b", "--gpus", "16", "--gpu", "h100-80gb", "--seq", "8192",
        "--checkpoint", "full", "--no-search", "--budget", "1TiB", "-o", str(plan))
    out = tmp_path / "job.toml"
    export(plan, "torchtitan", out)
    job = read_torchtitan_job(out)
    assert job.model.flavor == "70B"
    assert (job.parallelism.data_parallel_shard_degree, job.parallelism.data_parallel_replicate_degree) == (16, 1)
    assert (job.training.mixed_precision_param, job.training.mixed_precision_reduce) == ("bfloat16", "float32")
    assert job.activation_checkpoint.mode == "full"


def test_a_context_parallel_plan_exports_its_degree_and_shards_the_rest(tmp_path):
    plan = tmp_path / "cp.json"
    cli("plan", "--stack", "torchtitan", "--model", "llama-3.1-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq", "65536",
        "--ring", "4", "--ring-exchange", "allgather", "--checkpoint", "full", "--no-search", "--budget", "1TiB",
        "-o", str(plan))
    out = tmp_path / "job.toml"
    run = export(plan, "torchtitan", out)
    assert "approximation" not in run.stderr
    job = read_torchtitan_job(out)
    # FSDP2 over dp_shard x cp: every rank, as the plan's zero3.
    assert (job.parallelism.context_parallel_degree, job.parallelism.data_parallel_shard_degree) == (4, 2)
    assert job.parallelism.context_parallel_load_balancer == "headtail"
    assert job.parallelism.context_parallel_rotate_method == "allgather"
    # torchtitan trains with all-gather and pads nothing: the other exchange and an indivisible
    # sequence are refused when planned.
    for knobs, field in ((["--ring-exchange", "p2p", "--seq", "65536"], "--ring-exchange"),
                         (["--ring-exchange", "allgather", "--seq", "65540"], "--seq")):
        refused = cli("plan", "--stack", "torchtitan", "--model", "llama-3.1-8b", "--gpus", "8", "--ring", "4",
                      "--no-search", *knobs, check=False)
        assert refused.returncode == 2 and field in refused.stderr, refused.stderr
    # A longctx plan's ring is longctx's own: torchtitan would keep other buffers.
    ours = tmp_path / "ring.json"
    cli("plan", "--model", "tiny-gqa", "--gpus", "8", "--seq", "4096", "--sharding", "zero3", "--ring", "2",
        "--no-search", "--budget", "1TiB", "-o", str(ours))
    refused = cli("export", str(ours), "--stack", "torchtitan", check=False)
    assert refused.returncode == 2 and "parallel.ring" in refused.stderr, refused.stderr


def test_a_qwen3_plan_exports_torchtitans_qwen3_model_and_flavor(tmp_path):
    plan = tmp_path / "q3.json"
    cli("plan", "--stack", "torchtitan", "--model", "qwen3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq", "8192",
        "--checkpoint", "full", "--no-search", "--budget", "1TiB", "-o", str(plan))
    out = tmp_path / "job.toml"
    export(plan, "torchtitan", out)
    job = read_torchtitan_job(out)
    assert (job.model.name, job.model.flavor) == ("qwen3", "8B")
    assert job.parallelism.data_parallel_shard_degree == 8


def test_a_sharded_longctx_plan_exports_fsdp2_to_torchtitan(tmp_path):
    def longctx_plan(name, *knobs):
        path = tmp_path / name
        cli("plan", "--model", "tiny-gqa", "--gpus", "8", "--seq", "4096", "--no-search", "--budget", "1TiB", "-o",
            str(path), *knobs)
        return path

    out = tmp_path / "job.toml"
    run = export(longctx_plan("z2.json", "--sharding", "zero2", "--checkpoint", "full"), "torchtitan", out)
    assert "approximation: parallel.sharding" in run.stderr
    job = read_torchtitan_job(out)
    assert (job.parallelism.data_parallel_shard_degree, job.parallelism.data_parallel_replicate_degree) == (8, 1)
    assert job.activation_checkpoint.mode == "full"
    # No torchtitan flavor has tiny-gqa's shape: the file says what to register.
    assert "register TransformerModelArgs(dim=" in out.read_text()
    # What torchtitan would run with more memory than planned, or not at all, is refused by name.
    for plan, field in ((longctx_plan("u.json", "--sharding", "zero3", "--ulysses", "2"), "parallel.ulysses"),
                        (longctx_plan("ddp.json"), "parallel.sharding"),
                        (make_plan(tmp_path, "--sharding", "zero3", name="tied.json"), "model")):
        refused = cli("export", str(plan), "--stack", "torchtitan", check=False)
        assert refused.returncode == 2 and field in refused.stderr, refused.stderr