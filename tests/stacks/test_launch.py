"""`longctx export` writes a launch script beside each stack's configs (launch.sh); each
launcher's own argument parser accepts what the script runs it with. The launchers are
replaced on PATH by a stand-in that records its arguments and environment, so nothing is
launched; the recorded arguments then go to the parser of the installed launcher: torchrun's
(torch.distributed.run.get_args_parser), accelerate's (launch_command_parser), the deepspeed
runner's (deepspeed.launcher.runner.parse_args), and ArcticTraining's (arctic_training.cli:
its recipe argument, the rest passed on to the deepspeed runner)."""
import argparse
import json
import os
import pathlib
import shutil
import subprocess

import pytest

CLI = os.environ.get("LONGCTX_CLI")
BASH = shutil.which("bash")

# The stand-in: its name, then each argument, NUL-separated, and the allocator setting.
STAND_IN = """#!/usr/bin/env bash
{ printf '%s\\0' "$(basename "$0")" "$@"; } > "$LAUNCH_RECORD"
printf '%s' "${PYTORCH_CUDA_ALLOC_CONF-}" > "$LAUNCH_RECORD.alloc"
printf '%s' "${LONGCTX_MODEL-}" > "$LAUNCH_RECORD.model"
"""


def cli(*args, check=True, env=None):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    return subprocess.run([CLI, *args], check=check, capture_output=True, text=True, env=env)


def exported(tmp_path, plan_args, stack, name):
    plan = tmp_path / f"{name}.json"
    cli("plan", *plan_args, "-o", str(plan))
    out = tmp_path / name
    cli("export", str(plan), "--stack", stack, "-o", str(out) + "/")
    script = out / "launch.sh"
    assert script.exists() and os.access(script, os.X_OK)
    assert subprocess.run([BASH, "-n", str(script)]).returncode == 0
    return script


def launch(tmp_path, script, *args, **env):
    """Runs the script from an unrelated folder with the stand-ins first on PATH; returns the
    launcher's name, its arguments, and the allocator setting it saw."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("torchrun", "accelerate", "deepspeed", "arctic_training"):
        (bin_dir / name).write_text(STAND_IN)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LAUNCH_RECORD": str(record), **env}
    full_env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    run = subprocess.run([BASH, str(script), *args], cwd=elsewhere, env=full_env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    words = record.read_bytes().decode().split("\0")[:-1]
    return words[0], words[1:], (tmp_path / "record.alloc").read_text(), (tmp_path / "record.model").read_text()


def test_torchtitan_script_is_what_torchruns_parser_takes(tmp_path):
    run = pytest.importorskip("torch.distributed.run")
    script = exported(tmp_path, ["--stack", "torchtitan", "--model", "llama-3.1-8b", "--gpus", "8", "--seq", "32K",
                                 "--expandable-segments"], "torchtitan", "tt")
    name, argv, alloc, _ = launch(tmp_path, script, "--training.steps", "10")
    assert name == "torchrun" and alloc == "expandable_segments:True"
    args = run.get_args_parser().parse_args(argv)
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("1", "8", 0)
    assert args.module and args.training_script == "torchtitan.train"
    config = args.training_script_args[args.training_script_args.index("--job.config_file") + 1]
    assert pathlib.Path(config) == script.parent.resolve() / "torchtitan_job.toml"
    assert args.training_script_args[-2:] == ["--training.steps", "10"]
    # The preset's Hub id is no assets folder torchtitan reads: not passed, so the job file's
    # model.hf_assets_path (the command line would override it) holds; a folder given is passed.
    assert "--model.hf_assets_path" not in args.training_script_args
    assets = tmp_path / "tokenizer"
    assets.mkdir()
    _, argv, _, model = launch(tmp_path, script, MODEL=str(assets))
    args = run.get_args_parser().parse_args(argv)
    assert args.training_script_args[args.training_script_args.index("--model.hf_assets_path") + 1] == str(assets)
    # Two nodes of four: the same world, the rendezvous from the environment.
    _, argv, _, _ = launch(tmp_path, script, NNODES="2", GPUS_PER_NODE="4", NODE_RANK="1", MASTER_ADDR="10.0.0.1")
    args = run.get_args_parser().parse_args(argv)
    assert (args.nnodes, args.nproc_per_node, args.node_rank, args.master_addr) == ("2", "4", 1, "10.0.0.1")


def test_a_node_number_or_a_rendezvous_the_nodes_cannot_meet_at_is_refused(tmp_path):
    """Across nodes each node gives its number below NNODES and node 0's address: without it
    every node took 127.0.0.1, claimed rank 0 and waited for itself."""
    script = exported(tmp_path, ["--model", "llama-3.1-8b", "--gpus", "16", "--seq", "128K", "--no-search",
                                 "--sharding", "zero3", "--budget", "1TiB"], "deepspeed", "ds")
    for env, says in (({}, "MASTER_ADDR"), ({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "2"}, "NODE_RANK=2"),
                      ({"MASTER_ADDR": "10.0.0.1", "NODE_RANK": "x"}, "NODE_RANK=x")):
        run = subprocess.run([BASH, str(script), "train.py"], env={**os.environ, **env}, capture_output=True, text=True)
        assert run.returncode == 2 and says in run.stderr, (env, run.stderr)


def test_a_world_the_plan_was_not_made_for_is_refused(tmp_path):
    script = exported(tmp_path, ["--stack", "torchtitan", "--model", "llama-3.1-8b", "--gpus", "8", "--seq", "32K"],
                      "torchtitan", "tt")
    run = subprocess.run([BASH, str(script)], env={**os.environ, "GPUS_PER_NODE": "4"}, capture_output=True, text=True)
    assert run.returncode == 2 and "8 ranks" in run.stderr


def test_hf_script_is_what_accelerates_parser_takes(tmp_path):
    launch_mod = pytest.importorskip("accelerate.commands.launch")
    script = exported(tmp_path, ["--model", "llama-3.2-1b", "--gpus", "8", "--seq", "64K", "--no-search", "--sharding",
                                 "zero3", "--ulysses", "4", "--checkpoint", "full", "--budget", "1TiB"], "hf", "hf")
    name, argv, alloc, model = launch(tmp_path, script, "train.py", "--lr", "1e-5")
    assert name == "accelerate" and argv[0] == "launch" and alloc == ""
    args = launch_mod.launch_command_parser().parse_args(argv[1:])
    folder = script.parent.resolve()
    assert pathlib.Path(args.config_file) == folder / "accelerate_config.yaml"
    assert pathlib.Path(args.deepspeed_config_file) == folder / "ds_config.json"
    assert (args.num_machines, args.num_processes, args.machine_rank) == (1, 8, 0)
    # Across nodes each launches itself with torch's launcher, not DeepSpeed's pdsh runner.
    assert "deepspeed_multinode_launcher: \"standard\"" in (script.parent / "accelerate_config.yaml").read_text()
    assert args.training_script == "train.py" and args.training_script_args == ["--lr", "1e-5"]
    assert model == "meta-llama/Llama-3.2-1B"
    # The TrainingArguments carry the DeepSpeed config itself: no path to resolve.
    training_args = json.loads((folder / "training_args.json").read_text())
    assert training_args["deepspeed"] == json.loads((folder / "ds_config.json").read_text())


@pytest.mark.parametrize("plan_args", [
    ["--model", "llama-3.2-1b", "--gpus", "8", "--seq", "64K", "--no-search", "--sharding", "zero3", "--ulysses", "4",
     "--checkpoint", "full", "--budget", "1TiB"],
    ["--model", "llama-3.2-1b", "--gpus", "4", "--seq", "16K", "--no-search", "--stack", "hf", "--sharding", "zero3",
     "--ulysses", "4", "--checkpoint", "full", "--attention", "flash_attention_2", "--budget", "1TiB"],
    ["--model", "llama-3.2-1b", "--gpus", "2", "--seq", "8K", "--no-search", "--dtype", "fp32", "--sharding", "zero2",
     "--budget", "1TiB"],
], ids=["longctx-ulysses", "hf-deepspeed-ulysses", "fp32-zero2"])
def test_hf_deepspeed_config_passes_accelerates_launch_checks(tmp_path, monkeypatch, plan_args):
    """What `accelerate launch` does with the exported pair before any rank starts: its
    validation reads the YAML's fields (commands/launch.py _validate_launch_command), the
    DeepSpeed launcher passes the ones the config file set as ACCELERATE_CONFIG_DS_FIELDS
    (deepspeed_launcher), and each rank's DeepSpeedPlugin, which TrainingArguments builds
    too, refuses any of them beside a deepspeed_config_file (utils/dataclasses.py
    _deepspeed_config_checks): a mixed_precision in the YAML stopped every rank."""
    launch_mod = pytest.importorskip("accelerate.commands.launch")
    launch_utils = pytest.importorskip("accelerate.utils.launch")
    accelerate_utils = pytest.importorskip("accelerate.utils")
    pytest.importorskip("deepspeed")
    script = exported(tmp_path, plan_args, "hf", "hf")
    _, argv, _, _ = launch(tmp_path, script, "train.py")
    args = launch_mod.launch_command_parser().parse_args(argv[1:])
    args, defaults, mixed_precision_from_config = launch_mod._validate_launch_command(args)
    assert args.use_deepspeed
    fields = list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mixed_precision_from_config else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)
    _, env = launch_utils.prepare_deepspeed_cmd_env(args)
    for key in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    plugin = accelerate_utils.DeepSpeedPlugin()  # raised ValueError with the YAML's mixed_precision
    ds_config = json.loads((script.parent / "ds_config.json").read_text())
    assert plugin.deepspeed_config["zero_optimization"]["stage"] == ds_config["zero_optimization"]["stage"]
    assert plugin.deepspeed_config.get("bf16", {}).get("enabled", False) == ("fp32" not in plan_args)


def test_deepspeed_script_is_what_the_deepspeed_runner_takes(tmp_path):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    script = exported(tmp_path, ["--model", "llama-3.1-8b", "--gpus", "16", "--seq", "128K", "--no-search",
                                 "--sharding", "zero3", "--ulysses", "8", "--checkpoint", "full", "--budget", "1TiB"],
                      "deepspeed", "ds")
    for env, nodes in (({"MASTER_ADDR": "10.0.0.1"}, 2),
                       ({"NNODES": "4", "GPUS_PER_NODE": "4", "NODE_RANK": "3", "MASTER_ADDR": "10.0.0.1"}, 4)):
        name, argv, _, _ = launch(tmp_path, script, "train.py", "--steps", "1", **env)
        assert name == "deepspeed"
        args = runner.parse_args(argv)
        assert args.num_nodes == nodes and args.num_gpus == 16 // nodes
        assert args.no_ssh and args.node_rank == int(env.get("NODE_RANK", 0))  # each node launched by itself
        # The runner still takes the nodes from a hostfile (runner.py main(): without one it keeps
        # to the local GPUs and refuses --num_nodes above 1): one line a node, its GPUs as slots.
        pool = runner.fetch_hostfile(args.hostfile)
        assert pool is not None and len(pool) == nodes and set(pool.values()) == {16 // nodes}
        assert args.user_script == "train.py"
        config = args.user_args[args.user_args.index("--deepspeed_config") + 1]
        assert pathlib.Path(config) == script.parent.resolve() / "ds_config.json"
        assert args.user_args[-2:] == ["--steps", "1"]
    usage = subprocess.run([BASH, str(script)], env={**os.environ, "MASTER_ADDR": "10.0.0.1"}, capture_output=True,
                           text=True)
    assert usage.returncode == 2 and "TRAIN.py" in usage.stderr


def test_arctic_script_is_what_arctic_trainings_launcher_takes(tmp_path):
    runner = pytest.importorskip("deepspeed.launcher.runner")
    script = exported(tmp_path, ["--stack", "arctic", "--model", "llama-3.1-8b", "--gpus", "8", "--seq", "128K"],
                      "arctic", "arctic")
    name, argv, _, _ = launch(tmp_path, script)
    assert name == "arctic_training"
    # arctic_training/cli.py main: the recipe, then what it passes on to the deepspeed runner.
    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=pathlib.Path)
    args, deepspeed_args = parser.parse_known_args(argv)
    assert args.config == script.parent.resolve() / "arctic_recipe.yaml" and args.config.exists()
    ds = runner.parse_args([*deepspeed_args, "arctic_training_run", "--config", str(args.config)])
    assert (ds.num_nodes, ds.num_gpus, ds.no_ssh) == (1, 8, False)
    recipe = args.config.read_text()
    assert '"meta-llama/Llama-3.1-8B"' in recipe  # the model a stack loads, not the preset's name


def test_a_hub_id_from_the_local_cache_is_the_model_the_scripts_load(tmp_path):
    hub = tmp_path / "hub" / "models--acme--Tiny-Llama"
    (hub / "refs").mkdir(parents=True)
    (hub / "refs" / "main").write_text("0123abcd")
    (hub / "snapshots" / "0123abcd").mkdir(parents=True)
    (hub / "snapshots" / "0123abcd" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}))
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")}
    plan = tmp_path / "plan.json"
    cli("plan", "--model", "acme/Tiny-Llama", "--gpus", "2", "--seq", "4K", "--no-search", "--sharding", "zero3",
        "-o", str(plan), env=env)
    assert json.loads(plan.read_text())["model"]["_name_or_path"] == "acme/Tiny-Llama"
    missing = cli("plan", "--model", "acme/Other", "--gpus", "2", "--seq", "4K", check=False, env=env)
    assert missing.returncode == 2 and str(tmp_path / "hub" / "models--acme--Other") in missing.stderr
    cli("export", str(plan), "--stack", "arctic", "-o", str(tmp_path / "out") + "/")
    assert '"acme/Tiny-Llama"' in (tmp_path / "out" / "arctic_recipe.yaml").read_text()
