"""What the stacks' tests share: holding a `longctx.compare` of a profiled run to its plan."""
import os

TOLERANCE = 0.01

# One CPU kernel path on every machine. On a CPU with AVX512-BF16 (or AMX), PyTorch's CPU flash
# attention kernels run bf16 blocks through oneDNN's brgemm micro-kernel with packed operands
# (aten/src/ATen/native/cpu/FlashAttentionKernel.cpp: its BrgemmKey/PackBKey caches, where
# cpublas::need_pack says the micro-kernel packs), buffers the path the CPU footprints follow
# never allocates: the bf16 context-parallel proofs read -1.0% and -1.4% in backward on such a
# CPU and agree elsewhere. Capping oneDNN at AVX512_CORE, before any test imports torch (the
# ranks inherit it), keeps the modelled path on every machine; GPU runs take neither.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")


def drawn_seed():
    """The seed of a run's drawn cases: LONGCTX_VALIDATION_SEED where given (to replay a
    failure), else a fresh one each run, so that runs add up to shapes no one tuned against.
    The test prints it; pytest shows what a failing test printed."""
    import os
    import random
    given = os.environ.get("LONGCTX_VALIDATION_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 32)


def profile_second_step_of(step, trace_path):
    """Runs `step` twice, the second under the PyTorch profiler (profile_memory=True), and
    writes that step's Chrome trace: AdamW's state exists from the first on, as in any step but
    the first."""
    import torch

    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    prof.export_chrome_trace(str(trace_path))


# LibTorch's CPU GEMMs (aten::mm, addmm, bmm, baddbmm) in bf16 allocate scratch of their own
# (oneDNN's packed operands), freed before the call returns, of sizes that depend on the CPU's
# instruction set: a CPU artefact, not in any plan. GPU runs keep cuBLAS's workspace, which is.
_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def strip_cpu_gemm_scratch(trace_path):
    """Rewrites a profiler trace without the blocks a CPU GEMM allocates and frees inside one
    call (the Total Allocated of the events between lowered by them); returns the largest
    such block, so a test can say what it set aside."""
    import json

    trace = json.load(open(trace_path))
    events = trace["traceEvents"]
    gemms = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("name") in _GEMMS]
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    stripped, largest, open_blocks = set(), 0, {}
    for e in memory:
        addr, nbytes = e["args"].get("Addr"), e["args"]["Bytes"]
        if nbytes == 0:
            continue
        if nbytes > 0:
            open_blocks[addr] = e
            continue
        alloc = open_blocks.pop(addr, None)
        if alloc is None or alloc["args"]["Bytes"] != -nbytes:
            continue
        if any(b <= alloc["ts"] and e["ts"] <= end for b, end in gemms):
            stripped.update((id(alloc), id(e)))
            largest = max(largest, -nbytes)
    held = 0
    for e in memory:
        if id(e) in stripped:
            held += e["args"]["Bytes"]
        else:
            e["args"]["Total Allocated"] -= held
    trace["traceEvents"] = [e for e in events if id(e) not in stripped]
    json.dump(trace, open(trace_path, "w"))
    return largest


def assert_phases_within(c, tolerance=TOLERANCE):
    """The peak and every phase (forward with the loss, backward, optimizer) of a comparison
    within `tolerance` of the measured figure."""
    rows = {p["phase"]: p for p in c["phases"]}
    assert set(rows) == {"forward", "backward", "optimizer"}, c["phases"]
    report = ", ".join(f"{p}: {r['predicted_bytes']} vs {r['measured_bytes']}" for p, r in rows.items())
    assert abs(c["error"]) <= tolerance, f"peak {c['predicted_peak_bytes']} vs {c['measured_peak_bytes']} ({report})"
    for phase, r in rows.items():
        error = (r["predicted_bytes"] - r["measured_bytes"]) / r["measured_bytes"]
        assert abs(error) <= tolerance, f"{phase} off by {error:+.2%} ({report})"
