"""Hugging Face Trainer integration: measured peak memory beside longctx's prediction.

Add :class:`MemoryReportCallback` to a ``transformers.Trainer``; during one of the first
steps (the second by default: see ``step``) it measures the peak of allocated memory in three phases — forward (the model's forward and its
loss), backward, and the optimizer step — and at the end of that step reports them beside the
plan's predicted peaks for the same phases::

    plan = longctx.plan(model.config, gpus=1, seq=4096, gpu="cpu", stack="hf")
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[longctx.hf.MemoryReportCallback(plan)])

On CUDA the figures are ``torch.cuda.max_memory_allocated``, reset at each phase boundary.
On CPU they come from the PyTorch profiler (``profile_memory=True``), whose running total
counts only what is allocated while it profiles (c10's ProfiledCPUMemoryReporter); the
tensors alive before the step starts — parameters, buffers, gradients, optimizer states —
are added as a measured baseline, each storage once.

The callback refuses (:class:`longctx.BadInput`, naming each) a plan made for another run than
the Trainer's: its micro-batch (``per_device_train_batch_size``), sequence length (the first
batch's ``input_ids``), dtype (the model's parameters, and ``bf16`` autocast), gradient
checkpointing and, for an hf-stack plan, optimizer (``optim``) must be the plan's, since a
prediction for another step says nothing about this one.

Plan with ``stack="hf"``: the plan then predicts transformers' own step with the Trainer's
default optimizer (docs/stacks.md). A plan of longctx's own runtime predicts less than
Hugging Face's modules keep (its SwiGLU and RMSNorm save more activations, eager attention
keeps the softmax): the report shows both, it does not hide the difference.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

try:
    from transformers import TrainerCallback
except ModuleNotFoundError as missing:  # the planner needs none of it; this module does
    raise ModuleNotFoundError(
        "longctx.hf needs transformers (pip install 'longctx[hf]' or pip install transformers); "
        f"the rest of longctx does not ({missing})", name=missing.name) from missing

from ._api import BadInput, Plan, _whole

PHASES = ("forward", "backward", "optimizer")


def _phase_of(longctx_phase: str) -> str:
    """longctx's phase names grouped as a Trainer step runs them (its loss is in forward)."""
    if longctx_phase.startswith("backward"):
        return "backward"
    if longctx_phase == "optimizer":
        return "optimizer"
    return "forward"


def predicted_phase_peaks(plan: Plan) -> Dict[str, int]:
    """The plan's predicted device peak of each Trainer phase, bytes per rank."""
    peaks = {p: 0 for p in PHASES}
    for row in plan.prediction.phases:
        phase = _phase_of(row["phase"])
        peaks[phase] = max(peaks[phase], int(row["peak_device_bytes"]))
    return peaks


_DTYPE_WORDS = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.float16": "fp16"}


def trainer_differences(plan: Plan, args: Any, model: Any) -> List[str]:
    """What the Trainer runs that ``plan`` did not predict, one line each ("micro-batch: ..."):
    the micro-batch, the dtype, gradient checkpointing, the world size and, for an hf-stack plan,
    the optimizer.
    The sequence length is checked at the first batch (:func:`sequence_difference`)."""
    train = plan.data["train"]
    out: List[str] = []
    if int(args.per_device_train_batch_size) != plan.micro_batch:
        out.append(f"micro-batch: the Trainer's per_device_train_batch_size is {args.per_device_train_batch_size}, "
                   f"the plan's train.micro_batch {plan.micro_batch}")
    dtype = _DTYPE_WORDS.get(str(next(model.parameters()).dtype), str(next(model.parameters()).dtype))
    if getattr(args, "bf16", False) and dtype != "bf16":
        dtype = f"{dtype} parameters under bf16 autocast (bf16=True)"
    if dtype != train.get("dtype"):
        out.append(f"dtype: the Trainer runs {dtype}, the plan's train.dtype is {train.get('dtype')}")
    checkpointing = bool(getattr(args, "gradient_checkpointing", False)) or bool(
        (getattr(args, "fsdp_config", None) or {}).get("activation_checkpointing", False))
    policy = str(plan.parallel.get("checkpoint", "none"))
    # The Trainer checkpoints every decoder layer (transformers' gradient_checkpointing_enable):
    # the plan's "full"; every:K or per-op checkpointing keeps other tensors.
    if checkpointing != (policy != "none") or (checkpointing and policy != "full"):
        out.append(f"checkpointing: the Trainer's gradient_checkpointing is {checkpointing} (every layer), the plan's "
                   f"parallel.checkpoint is {policy}")
    # A plan's figures are per rank at its world size: another count holds other shards and
    # sequence slices (an 8-GPU zero3 plan against one process compared a whole step with an
    # eighth of one).
    world = int(getattr(args, "world_size", 1) or 1)
    planned_world = int(plan.data["cluster"].get("gpus", 1))
    if world != planned_world:
        out.append(f"world size: the Trainer runs {world} process(es) (args.world_size), the plan's cluster.gpus is "
                   f"{planned_world}")
    stack = train.get("stack", {})
    optim = str(getattr(getattr(args, "optim", None), "value", getattr(args, "optim", "")))
    if stack.get("name") == "hf" and stack.get("optimizer") and optim != stack["optimizer"]:
        out.append(f"optimizer: the Trainer's optim is {optim}, the plan's train.stack.optimizer {stack['optimizer']}")
    return out


def sequence_difference(plan: Plan, input_ids: Any) -> Optional[str]:
    """The line naming a batch's sequence length when it is not the plan's, else None."""
    seq = int(input_ids.shape[-1])
    if seq == plan.seq:
        return None
    return f"sequence length: the Trainer's batches hold {seq} tokens, the plan's train.seq is {plan.seq}"


def _refuse(differences: List[str]) -> None:
    raise BadInput("plan", "the plan predicts another step than the Trainer runs; re-plan with the Trainer's "
                           "settings (or set the Trainer's to the plan's): " + "; ".join(differences))


@dataclass
class PhaseRow:
    phase: str
    predicted_bytes: int
    measured_bytes: int

    @property
    def error(self) -> Optional[float]:
        """(predicted - measured) / measured: negative where the plan predicts less."""
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes if self.measured_bytes > 0 else None


def _live_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of every distinct storage the step starts with."""
    import torch

    seen: Dict[int, int] = {}

    def add(t: Any) -> None:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()

    for p in model.parameters():
        add(p)
        add(p.grad)
    for b in model.buffers():
        add(b)
    if optimizer is not None:
        for state in optimizer.state.values():
            for v in state.values():
                add(v)
    return sum(seen.values())


class MemoryReportCallback(TrainerCallback):
    """Measures one step's peak memory per phase and reports it beside `plan`'s.

    ``step`` is the (0-based) step measured. The default, 1, is the first step that starts
    with the optimizer's states in place (AdamW creates them in step 0's optimizer phase),
    which is the steady state a plan predicts; step 0's forward and backward hold less.
    After the step, :attr:`rows` holds one :class:`PhaseRow` per phase and :attr:`report`
    the printed table; ``report_to`` receives the table (default: print)."""

    def __init__(self, plan: Plan, step: int = 1, report_to: Callable[[str], None] = print):
        # Checked here, not at the first step: a wrong argument failed later as AttributeError.
        if not isinstance(plan, Plan):
            raise BadInput("plan", f"{type(plan).__name__} is not a longctx.Plan; pass longctx.plan(...) or Plan.load(path)")
        refusal = "is not a step: give the 0-based step to measure, 0 or more"
        step = _whole("step", step, refusal)  # an int by Python's rule: numpy's and torch's too
        if step < 0:
            raise BadInput("step", f"{step!r} {refusal}")
        if not callable(report_to):
            raise BadInput("report_to", f"{report_to!r} is not callable; give a function of one string, such as print")
        self.plan = plan
        self.step = step
        self.report_to = report_to
        self.rows: List[PhaseRow] = []
        self.report: str = ""
        self._measuring = False
        self._phase: Optional[str] = None
        self._cuda = False
        self._measured: Dict[str, int] = {}
        self._profiler: Any = None
        self._ranges: Dict[str, Any] = {}
        self._baseline = 0
        self._hooks: List[Any] = []
        self._model: Any = None
        self._optimizer: Any = None

    # -- phases ------------------------------------------------------------------------
    def _enter(self, phase: str) -> None:
        import torch

        self._phase = phase
        if self._cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self._ranges[phase] = torch.profiler.record_function(f"longctx.{phase}")
            self._ranges[phase].__enter__()

    def _leave(self) -> None:
        import torch

        if self._phase is None:
            return
        if self._cuda:
            torch.cuda.synchronize()
            self._measured[self._phase] = int(torch.cuda.max_memory_allocated())
        else:
            self._ranges.pop(self._phase).__exit__(None, None, None)
        self._phase = None

    # -- Trainer events ----------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        differences = trainer_differences(self.plan, args, model)
        if differences:
            _refuse(differences)
        self._model, self._optimizer = model, optimizer
        self._cuda = next(model.parameters()).device.type == "cuda"
        checked = []

        def before_forward(module, inputs, kwargs):
            if not checked:
                ids = kwargs.get("input_ids", inputs[0] if inputs else None)
                if ids is not None:
                    checked.append(True)
                    wrong = sequence_difference(self.plan, ids)
                    if wrong:
                        _refuse([wrong])
            if self._measuring and self._phase is None:
                self._enter("forward")

        def after_forward(module, inputs, output):
            if self._measuring and self._phase == "forward":
                self._leave()
                self._enter("backward")

        self._hooks = [model.register_forward_pre_hook(before_forward, with_kwargs=True),
                       model.register_forward_hook(after_forward)]

    def on_step_begin(self, args, state, control, **kwargs):
        import torch

        if state.global_step != self.step or self.rows:
            return
        self._measuring = True
        if not self._cuda:
            self._baseline = _live_bytes(self._model, kwargs.get("optimizer") or self._optimizer)
            self._profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            self._profiler.__enter__()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._measuring:
            self._leave()
            self._enter("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._measuring:
            self._leave()

    def on_step_end(self, args, state, control, **kwargs):
        if not self._measuring:
            return
        self._leave()
        self._measuring = False
        if not self._cuda:
            self._profiler.__exit__(None, None, None)
            self._measured = self._profiler_peaks()
        predicted = predicted_phase_peaks(self.plan)
        self.rows = [PhaseRow(p, predicted[p], self._measured.get(p, 0)) for p in PHASES]
        self.report = self._table()
        self.report_to(self.report)
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def on_train_end(self, args, state, control, **kwargs):
        # Training that ends before the step measured (max_steps=1 against the default step 1)
        # would otherwise report nothing and say nothing.
        if not self.rows:
            warnings.warn(f"longctx: training ended after {state.global_step} step(s), before step {self.step} "
                          "(0-based) that MemoryReportCallback measures: nothing was measured; pass step=0 or "
                          "train longer", stacklevel=2)
        for h in self._hooks:
            h.remove()
        self._hooks = []

    # -- CPU: the profiler's memory events, by phase --------------------------------------
    def _profiler_peaks(self) -> Dict[str, int]:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            self._profiler.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        finally:
            os.remove(path)
        ranges = {e["name"][len("longctx."):]: (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                  for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("longctx.")}
        memory = sorted((float(e["ts"]), int(e["args"]["Total Allocated"])) for e in events
                        if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type", 0) == 0)
        peaks: Dict[str, int] = {}
        for phase, (start, end) in ranges.items():
            level = 0  # the running total when the phase starts
            peak = 0
            for ts, total in memory:
                if ts < start:
                    level = total
                elif ts <= end:
                    peak = max(peak, total)
            peaks[phase] = self._baseline + max(level, peak)
        return peaks

    def _table(self) -> str:
        lines = [f"longctx: measured beside predicted, step {self.step} ({'cuda' if self._cuda else 'cpu'})",
                 f"{'phase':<10} {'predicted':>14} {'measured':>14} {'error':>9}"]
        for r in self.rows:
            err = f"{100 * r.error:+.1f}%" if r.error is not None else "-"
            lines.append(f"{r.phase:<10} {r.predicted_bytes:>14} {r.measured_bytes:>14} {err:>9}")
        return "\n".join(lines)
