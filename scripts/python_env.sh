#!/usr/bin/env bash
# The project's Python environment, .venv/ in the clone: the longctx package built from this
# checkout (`pip install .`: the planner only), pytest, and for the Hugging Face tests torch
# from the same cached wheel LibTorch comes from (scripts/setup.sh) plus transformers and
# DeepSpeed (its Python only) from PyPI. A second run returns at once when nothing the
# environment is made from changed since the first (.venv/.longctx-made: delete it to redo
# every step), and otherwise only rebuilds the package (incrementally, in build-python/).
#
# Prints the venv's python on its last line. LONGCTX_PYTHON_HF=0 leaves torch and
# transformers out (the package and its API tests need neither).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
CACHE_ROOT="${LONGCTX_CACHE:-$HOME/.cache/longctx}"
TRANSFORMERS_VERSION=4.57.1
DEEPSPEED_VERSION=0.19.8
TORCHTITAN_VERSION=0.2.2
TRL_VERSION=1.14.2
ACCELERATE_VERSION=1.15.0

log() { printf '[python_env] %s\n' "$*" >&2; }

# Up to date: nothing the environment is made from (this script, the package's sources, the
# cached torch wheel) changed since it was last made whole. The check costs a file walk; the
# steps below cost half a minute even when they change nothing (imports, pip's resolver, the
# package's rebuild), and the tests' fixture calls this script on every ctest run.
stamp="$venv/.longctx-made"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${LONGCTX_PYTHON_HF:-1}" ] &&
   [ -z "$(find "$root" \( -path "$root/.git" -o -path "$root/.venv" -o -path "$root/build*" \
                            -o -path "$root/tests" -o -path "$root/docs" -o -path "$root/traces" \) -prune \
                         -o -newer "$stamp" -print -quit)" ] &&
   [ -z "$(find "${LONGCTX_CACHE:-$HOME/.cache/longctx}/wheels" -name 'torch-*.whl' -newer "$stamp" -print -quit 2>/dev/null)" ]; then
  echo "$venv/bin/python"
  exit 0
fi
rm -f "$stamp"

python=$(command -v python3)
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  "$python" -m venv "$venv" >&2
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install "pytest>=7" "scikit-build-core>=0.10" "nanobind>=2.0" >&2

if [ "${LONGCTX_PYTHON_HF:-1}" = 1 ]; then
  # Importing torch here, to see what is installed, needs its CUDA libraries on the path.
  # shellcheck source=scripts/torch_libraries.sh
  . "$root/scripts/torch_libraries.sh"
  if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
    wheel=$(ls "$CACHE_ROOT"/wheels/torch-*.whl | head -n 1)
    log "installing torch from $wheel and transformers $TRANSFORMERS_VERSION"
    "${pip[@]}" install --no-deps "$wheel" >&2
    log "pip reports torch's nvidia-* requirements as not installed from here on: as intended"
    # Everything that requires torch goes in without its dependencies, and theirs are named
    # here: pip's resolver otherwise walks the installed torch's requirements and downloads
    # the 3 GB of nvidia-* wheels this environment is built to do without.
    "${pip[@]}" install filelock typing-extensions sympy networkx jinja2 fsspec numpy \
      "transformers==$TRANSFORMERS_VERSION" psutil pyyaml "huggingface-hub>=0.34,<1.0" \
      "safetensors>=0.4.3" >&2
    "${pip[@]}" install --no-deps "accelerate==$ACCELERATE_VERSION" >&2
  fi
  # DeepSpeed's config parser, for `longctx export`'s tests: DS_BUILD_OPS=0 builds none of its
  # kernels (pure Python, seconds), which reading a config needs none of. Its setup.py imports
  # torch, so it builds against this environment's (no build isolation).
  if ! "$venv/bin/python" -c "import deepspeed" 2>/dev/null; then
    log "installing deepspeed $DEEPSPEED_VERSION (no ops)"
    "${pip[@]}" install einops hjson msgpack ninja py-cpuinfo "pydantic>=2.0" tqdm wheel >&2
    DS_BUILD_OPS=0 "${pip[@]}" install --no-deps --no-build-isolation \
      "deepspeed==$DEEPSPEED_VERSION" >&2
  fi
  # torchtitan's Llama 3 model, activation checkpointing and loss, for the torchtitan stack's
  # tests: the package without its dependencies (one of which pins a torch nightly), and only
  # what importing those modules needs (its config parser, data loader and metrics modules are
  # imported by the package's __init__s). huggingface-hub stays below 1.0 for transformers.
  if ! "$venv/bin/python" -c "import torchtitan.models.llama3.model.model" 2>/dev/null; then
    log "installing torchtitan $TORCHTITAN_VERSION (its model code and what importing it needs)"
    # Its modules import triton: the version the torch wheel pins (a wheel of no dependencies).
    triton_pin=$("$venv/bin/python" -c 'import importlib.metadata as m
print(next(r.split(";")[0].replace(" ", "") for r in m.requires("torch") if r.startswith("triton")))')
    "${pip[@]}" install --no-deps "torchtitan==$TORCHTITAN_VERSION" "torchdata==0.11.0" \
      "$triton_pin" >&2
    "${pip[@]}" install "tyro==1.0.17" "tomli>=1.1" "tensorboard==2.21.0" "datasets==5.0.1" "huggingface-hub>=0.34,<1.0" >&2
  fi
  # TRL's SFTTrainer chunked loss, for the hf stack's `--hf-loss trl-chunked-nll` tests: the
  # package without its dependencies (the tests import its loss, not its trainer's data stack;
  # 1.14.2 is the last release whose chunked_nll is TRL's own, 1.15 moved it to transformers).
  if ! "$venv/bin/python" -c "import trl.trainer.sft_trainer" 2>/dev/null; then
    log "installing trl $TRL_VERSION (no dependencies)"
    "${pip[@]}" install --no-deps "trl==$TRL_VERSION" >&2
  fi
  # The guard for the paragraph above: a dependency that slips torch's requirements back in
  # costs every clean run 3 GB of downloads and disk, which is how a full disk fails CI.
  if "${pip[@]}" list 2>/dev/null | grep -qi '^nvidia-'; then
    log "error: nvidia-* wheels were installed into $venv; install the package that"
    log "required them with --no-deps in scripts/python_env.sh, then delete $venv"
    exit 1
  fi
fi

# The package itself, from this checkout; the build folder is reused between runs, and the
# compiler cache is the one scripts/build.sh shares between clones.
# shellcheck source=scripts/ccache_env.sh
. "$root/scripts/ccache_env.sh"
"${pip[@]}" install --no-build-isolation "$root" >&2
echo "${LONGCTX_PYTHON_HF:-1}" > "$stamp"
echo "$venv/bin/python"
