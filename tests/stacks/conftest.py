"""What the stacks' tests share: holding a `longctx.compare` of a profiled run to its plan."""
TOLERANCE = 0.01


def profile_second_step_of(step, trace_path):
    """Runs `step` twice, the second under the PyTorch profiler (profile_memory=True), and
    writes that step's Chrome trace: AdamW's state exists from the first on, as in any step but
    the first."""
    import torch

    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    prof.export_chrome_trace(str(trace_path))


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
