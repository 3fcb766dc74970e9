# Sourced, with $root the clone: puts torch's CUDA libraries on the loader's path for a Python
# that imports torch. They come from the CUDA toolkit and LibTorch's prefix (setup.sh fetches
# the wheel LibTorch is unpacked from and prints the prefix on its last line), not from PyPI's
# nvidia-* wheels, which the project's environment is built to do without
# (scripts/python_env.sh).
torch_prefix=$(bash "$root/scripts/setup.sh" | tail -n 1)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$torch_prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
