"""Regenerates stack_keys.json: the config keys DeepSpeed and ArcticTraining define, read from
their source with `ast` (neither package is imported: ArcticTraining pulls heavy dependencies).

    python tests/python/data/extract_stack_keys.py DEEPSPEED_GIT_DIR ARCTIC_GIT_DIR > tests/python/data/stack_keys.json

Each argument is a git checkout (a bare one will do); the files are read at its HEAD, whose
commit is recorded beside the keys.
"""
import ast
import json
import subprocess
import sys


def show(repo, path):
    return subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True).stdout


def head(repo):
    return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def class_fields(source, name):
    """Annotated fields of class `name`, with every pydantic alias="..." beside them."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            keys = []
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    keys.append(item.target.id)
                    for call in ast.walk(item):
                        if isinstance(call, ast.keyword) and call.arg == "alias" and isinstance(call.value, ast.Constant):
                            keys.append(call.value.value)
            return sorted(keys)
    raise KeyError(name)


def string_constants(source, prefix=""):
    """Values of module-level NAME = "text" assignments whose NAME starts with `prefix`."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id.isupper() and t.id.startswith(prefix) and "\n" not in node.value.value:
                    out.append(node.value.value)
    return sorted(set(out))


def keys_tested_with_in(source):
    """String literals a config is asked about with `"key" in config` (keys read ad hoc)."""
    return sorted({n.left.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Compare)
                   and isinstance(n.left, ast.Constant) and isinstance(n.left.value, str)
                   and any(isinstance(op, ast.In) for op in n.ops)})


def registered_names(repo, paths):
    names = []
    for path in paths:
        for node in ast.walk(ast.parse(show(repo, path))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name)
                            and item.targets[0].id == "name" and isinstance(item.value, ast.Constant)):
                        names.append(item.value.value)
    return sorted(names)


def deepspeed_keys(repo):
    offload = show(repo, "deepspeed/runtime/zero/offload_config.py")
    zero = show(repo, "deepspeed/runtime/zero/config.py")
    checkpointing = show(repo, "deepspeed/runtime/activation_checkpointing/config.py")
    # The names DeepSpeedConfig (runtime/config.py) reads: runtime/constants.py, the section
    # names the zero and activation-checkpointing configs define, and keys config.py tests ad hoc.
    top_level = (string_constants(show(repo, "deepspeed/runtime/constants.py"))
                 + [k for k in string_constants(zero, "ZERO_OPTIMIZATION") if k == "zero_optimization"]
                 + [k for k in string_constants(checkpointing, "ACT_CHKPT") if k == "activation_checkpointing"]
                 + keys_tested_with_in(show(repo, "deepspeed/runtime/config.py")))
    return {
        "source": {"repo": "deepspeedai/DeepSpeed", "commit": head(repo)},
        "top_level": sorted(set(top_level)),
        "zero_optimization": class_fields(zero, "DeepSpeedZeroConfig"),
        "offload_param": class_fields(offload, "DeepSpeedZeroOffloadParamConfig"),
        "offload_optimizer": class_fields(offload, "DeepSpeedZeroOffloadOptimizerConfig"),
        "activation_checkpointing": string_constants(checkpointing, "ACT_CHKPT_"),
    }


def arctic_keys(repo):
    cfg = "arctic_training/config/"
    return {
        "source": {"repo": "snowflakedb/ArcticTraining", "commit": head(repo)},
        "TrainerConfig": class_fields(show(repo, cfg + "trainer.py"), "TrainerConfig"),
        "ModelConfig": class_fields(show(repo, cfg + "model.py"), "ModelConfig"),
        "DataConfig": class_fields(show(repo, cfg + "data.py"), "DataConfig"),
        # The sft trainer's data config adds its own fields (padding, packing) to DataConfig's.
        "SFTDataConfig": class_fields(show(repo, "arctic_training/data/sft_factory.py"), "SFTDataConfig"),
        "OptimizerConfig": class_fields(show(repo, cfg + "optimizer.py"), "OptimizerConfig"),
        "model_factories": registered_names(repo, ["arctic_training/model/hf_factory.py",
                                                   "arctic_training/model/liger_factory.py"]),
        "optimizer_factories": registered_names(repo, ["arctic_training/optimizer/adam_factory.py"]),
        "trainers": registered_names(repo, ["arctic_training/trainer/sft_trainer.py"]),
    }


if __name__ == "__main__":
    json.dump({"deepspeed": deepspeed_keys(sys.argv[1]), "arctic_training": arctic_keys(sys.argv[2])},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
