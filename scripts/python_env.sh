#!/usr/bin/env bash
# The project's Python environment, .venv/ in the clone: the longctx package built from this
# checkout (`pip install .`: the planner only), pytest, and for the Hugging Face tests torch
# from the same cached wheel LibTorch comes from (scripts/setup.sh) plus transformers and
# DeepSpeed (its Python only) from PyPI. A second run only rebuilds the package
# (incrementally, in build-python/).
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

log() { printf '[python_env] %s\n' "$*" >&2; }

python=$(command -v python3)
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  "$python" -m venv "$venv" >&2
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install "pytest>=7" "scikit-build-core>=0.10" "nanobind>=2.0" >&2

if [ "${LONGCTX_PYTHON_HF:-1}" = 1 ]; then
  if ! "$venv/bin/python" -c "import torch, transformers" 2>/dev/null; then
    # setup.sh fetches the torch wheel LibTorch is unpacked from, and keeps only that version's.
    bash "$root/scripts/setup.sh" >/dev/null
    wheel=$(ls "$CACHE_ROOT"/wheels/torch-*.whl | head -n 1)
    log "installing torch from $wheel and transformers $TRANSFORMERS_VERSION"
    # The wheel's CUDA libraries come from /usr/local/cuda and LibTorch's cache
    # (LD_LIBRARY_PATH in scripts/python_tests.sh), not from PyPI's nvidia-* wheels.
    "${pip[@]}" install --no-deps "$wheel" >&2
    "${pip[@]}" install filelock typing-extensions sympy networkx jinja2 fsspec numpy \
      "transformers==$TRANSFORMERS_VERSION" "accelerate>=0.26" >&2
  fi
  # DeepSpeed's config parser, for `longctx export`'s tests: DS_BUILD_OPS=0 builds none of its
  # kernels (pure Python, seconds), which reading a config needs none of.
  if ! "$venv/bin/python" -c "import deepspeed" 2>/dev/null; then
    log "installing deepspeed $DEEPSPEED_VERSION (no ops)"
    DS_BUILD_OPS=0 "${pip[@]}" install "deepspeed==$DEEPSPEED_VERSION" >&2
  fi
  # torchtitan's Llama 3 model, activation checkpointing and loss, for the torchtitan stack's
  # tests: the package without its dependencies (one of which pins a torch nightly), and only
  # what importing those modules needs (its config parser, data loader and metrics modules are
  # imported by the package's __init__s). huggingface-hub stays below 1.0 for transformers.
  if ! "$venv/bin/python" -c "import torchtitan.models.llama3.model.model" 2>/dev/null; then
    log "installing torchtitan $TORCHTITAN_VERSION (its model code and what importing it needs)"
    "${pip[@]}" install --no-deps "torchtitan==$TORCHTITAN_VERSION" "torchdata==0.11.0" >&2
    "${pip[@]}" install "tyro==1.0.17" "tomli>=1.1" "tensorboard==2.21.0" "datasets==5.0.1" "huggingface-hub>=0.34,<1.0" >&2
  fi
  # TRL's SFTTrainer chunked loss, for the hf stack's `--hf-loss trl-chunked-nll` tests: the
  # package without its dependencies (the tests import its loss, not its trainer's data stack;
  # 1.14.2 is the last release whose chunked_nll is TRL's own, 1.15 moved it to transformers).
  if ! "$venv/bin/python" -c "import trl.trainer.sft_trainer" 2>/dev/null; then
    log "installing trl $TRL_VERSION (no dependencies)"
    "${pip[@]}" install --no-deps "trl==$TRL_VERSION" >&2
  fi
fi

# The package itself, from this checkout; the build folder is reused between runs, and the
# compiler cache is the one scripts/build.sh shares between clones.
export CCACHE_DIR="${CCACHE_DIR:-$CACHE_ROOT/ccache}" CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
"${pip[@]}" install --no-build-isolation "$root" >&2
echo "$venv/bin/python"
