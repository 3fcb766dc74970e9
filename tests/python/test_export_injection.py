"""`longctx export` with hostile model names: a name from an edited plan or from a --model
folder's name reaches the comment lines and values of every exported file. Each file is read
back with the stack's own parser (PyYAML, tomllib, json; DeepSpeed's config class where it is
installed) and must hold exactly the keys the same export of a plainly named plan holds, with
the name as a value only, never as a key, a table or a second document."""
import json
import os
import subprocess
import sys

import pytest

yaml = pytest.importorskip("yaml")
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

CLI = os.environ.get("LONGCTX_CLI")

# Newlines that would start keys (seed, a checkpoint folder, main_process_ip) or TOML tables,
# quotes, '#', ':', a YAML document end, control bytes, DEL, C1 and Unicode line separators.
HOSTILE = [
    "m\nseed: 1337\ncheckpoint:\n  - output_dir: /tmp/x",
    "m\r\nmain_process_ip: 10.0.0.1",
    "m\n[checkpoint]\nfolder = \"/tmp/x\"",
    'm" : {"seed": 1} # "',
    "m' # : - ! & * | > % @ `",
    "m\n---\nseed: 1\n...",
    "m\x00\x01\x07\x08\x0b\x0c\x1b[31m\x7f\x85\u2028\u2029\ufeff",
    "m\\\\\"\\n",
]
# Stacks and the stack's parser for each file name's suffix.
STACKS = ["deepspeed", "arctic", "hf", "torchtitan"]


def cli(*args, check=True):
    if not CLI:
        pytest.skip("LONGCTX_CLI (the longctx binary) is not set: run through ctest")
    return subprocess.run([CLI, *args], check=check, capture_output=True)


def make_plan(folder, *args):
    path = folder / "plan.json"
    cli("plan", "--gpus", "8", "--seq", "65536", "--no-search", "--budget", "1TiB", "--sharding", "zero3", "-o", str(path),
        *args)
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def plain_plans(tmp_path_factory):
    """A plan each stack exports: longctx's (deepspeed, arctic, hf) and torchtitan's own."""
    longctx_plan = make_plan(tmp_path_factory.mktemp("plan"), "--model", "llama-3.2-1b", "--offload-optimizer")
    torchtitan_plan = make_plan(tmp_path_factory.mktemp("plan"), "--model", "llama-3.1-8b", "--stack", "torchtitan")
    return {stack: torchtitan_plan if stack == "torchtitan" else longctx_plan for stack in STACKS}


def parse(name, data):
    text = data.decode("utf-8")  # every exported file is UTF-8 (bytes that were not become U+FFFD)
    if name.endswith(".yaml"):
        docs = list(yaml.safe_load_all(text))
        assert len(docs) == 1, f"{name}: {len(docs)} YAML documents"
        return docs[0]
    if name.endswith(".toml"):
        return tomllib.loads(text)
    if name.endswith(".sh"):
        # The launch script: bash reads it (its syntax holds), and a name adds no line of its own
        # (its lines, by position, are what the test compares).
        check = subprocess.run(["bash", "-n"], input=data, capture_output=True)
        assert check.returncode == 0, (name, check.stderr)
        return {"lines": [None] * len(text.splitlines())}
    return json.loads(text)


def key_paths(value, prefix=""):
    """Every key path of a parsed file ("deepspeed.zero_optimization.stage"), lists by position."""
    out = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(prefix + str(k))
            out |= key_paths(v, prefix + str(k) + ".")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out |= key_paths(v, f"{prefix}[{i}].")
    return out


def export_all(tmp_path, plan, stack):
    plan_path = tmp_path / f"{stack}.plan.json"
    plan_path.write_text(json.dumps(plan))
    out = tmp_path / f"{stack}-out"
    cli("export", str(plan_path), "--stack", stack, "-o", str(out) + "/")
    return {f.name: parse(f.name, f.read_bytes()) for f in sorted(out.iterdir())}


@pytest.mark.parametrize("stack", STACKS)
def test_hostile_model_names_add_no_key(tmp_path, plain_plans, stack):
    expected = {name: key_paths(v) for name, v in export_all(tmp_path, plain_plans[stack], stack).items()}
    for i, hostile in enumerate(HOSTILE):
        plan = json.loads(json.dumps(plain_plans[stack]))
        plan["model"]["name"] = hostile
        # A preset's Hub id (its config's _name_or_path) is what the recipe loads; without one,
        # the name.
        plan["model"].pop("_name_or_path", None)
        case = tmp_path / str(i)
        case.mkdir()
        got = export_all(case, plan, stack)
        assert set(got) == set(expected), (hostile, set(got) ^ set(expected))
        for name, value in got.items():
            assert key_paths(value) == expected[name], (stack, name, repr(hostile), key_paths(value) ^ expected[name])
        # Where the name is a value, it reads back whole.
        if stack == "arctic":
            assert got["arctic_recipe.yaml"]["model"]["name_or_path"] == hostile


TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5}


def model_folder(tmp_path, name: bytes):
    folder = os.path.join(os.fsencode(tmp_path), name)
    os.mkdir(folder)
    with open(os.path.join(folder, b"config.json"), "w") as f:
        json.dump(TINY, f)
    return folder


def test_a_folder_name_that_is_not_utf8_becomes_replacement_characters(tmp_path):
    """A --model folder's name need not be UTF-8 (it once ended `plan -o` in SIGABRT: dump()
    threw on the byte 0xFF); every file written from it is UTF-8 and parses."""
    folder = model_folder(tmp_path, b"m\xff\xfe: seed # x")
    plan = tmp_path / "plan.json"
    cli("plan", "--model", folder, "--gpus", "8", "--seq", "4096", "--no-search", "--sharding", "zero3", "-o", str(plan))
    assert json.loads(plan.read_text())["model"]["name"] == "m\ufffd\ufffd: seed # x"
    for stack in ("deepspeed", "arctic", "hf"):
        out = tmp_path / stack
        cli("export", str(plan), "--stack", stack, "-o", str(out) + "/")
        for f in out.iterdir():
            value = parse(f.name, f.read_bytes())
            assert not any(k.split(".")[-1] == "seed" for k in key_paths(value)), (stack, f.name)


def test_a_folder_name_with_control_characters_is_refused_on_the_command_line(tmp_path):
    folder = model_folder(tmp_path, b"m\nseed: 1337\n# x")
    run = cli("plan", "--model", folder, "--gpus", "8", "--seq", "4096", "--no-search", check=False)
    assert run.returncode == 2 and b"--model: holds a control character" in run.stderr, run.stderr


def test_deepspeed_reads_the_config_of_a_hostile_name(tmp_path, plain_plans):
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    plan = json.loads(json.dumps(plain_plans["deepspeed"]))
    plan["model"]["name"] = HOSTILE[0]
    files = export_all(tmp_path, plan, "deepspeed")
    config = ds_config.DeepSpeedConfig(files["ds_config.json"])
    assert config.zero_optimization_stage == 3 and config.zero_config.offload_optimizer.device == "cpu"


def test_stage_zero_with_optimizer_offload_is_refused(tmp_path):
    """DeepSpeed offloads the optimizer under ZeRO only: at stage 0 its CPU Adam steps
    parameters on the GPU and fails (DeepSpeedCPUAdam.step). The export refuses it."""
    plan = tmp_path / "plan.json"
    cli("plan", "--model", "llama-3.2-1b", "--gpus", "8", "--seq", "65536", "--no-search", "--budget", "1TiB",
        "--sharding", "none", "--offload-optimizer", "-o", str(plan))
    for stack in ("deepspeed", "arctic", "hf"):
        run = cli("export", str(plan), "--stack", stack, check=False)
        assert run.returncode == 2, (stack, run.stdout, run.stderr)
        assert b"parallel.offload_optimizer" in run.stderr and b"stage 0" in run.stderr, run.stderr
