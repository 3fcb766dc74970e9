"""The measured ladder of the GPU kit: longctx plans run for real, measured beside predicted.

    python3 bench/gpu_ladder.py init OUT --device cuda|cpu [--commit SHA] [--manifest FILE]
    python3 bench/gpu_ladder.py step OUT NAME STATUS SECONDS [--detail TEXT]
    python3 bench/gpu_ladder.py ctest OUT JUNIT.xml... [--seconds S]
    python3 bench/gpu_ladder.py ladder OUT --longctx CLI --device cuda|cpu [--deadline EPOCH] [--rows NAME,...]
    python3 bench/gpu_ladder.py max-context OUT --longctx CLI --device cuda|cpu [--deadline EPOCH]
    python3 bench/gpu_ladder.py report OUT            (writes OUT/gpu_kit.md and prints it)
    python3 bench/gpu_ladder.py check OUT/gpu_kit.json [--min-measured N]

Every subcommand reads and rewrites one document, OUT/gpu_kit.json (schema longctx.gpu_kit/1,
docs/gpu-kit.md), in place and whole (a temporary file renamed over it), so a step that is
killed leaves what the steps before it wrote. scripts/gpu_kit.sh run calls them in order.

Each row is planned with `longctx plan --no-search` on one GPU of the preset (h200-141gb on
CUDA, cpu on the CPU virtual device) and the host memory this machine has, then run with
`longctx run --device D --json` for two steps. Measured: the caching allocator's peaks
(torch.cuda.max_memory_allocated and max_memory_reserved, as `run` reads them), the host
peak, the last step's time, and on CUDA the memory NVML (nvidia-ml-py) counts for the run's
process, polled by a thread while it runs: what nvidia-smi shows. Predicted: the plan's
allocated, reserved and nvidia-smi peaks and its step time. Rows that would not finish before
the deadline are skipped and say so; the time a row needs is estimated from its predicted
step time and the start-up cost the rows before it measured.

Uses the standard library only; nvidia-ml-py's pynvml where it is installed (the GPU image).
"""
import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

SCHEMA = "longctx.gpu_kit/1"
DOC = "gpu_kit.json"
TABLE = "gpu_kit.md"
GIB = 1 << 30
MIB = 1 << 20
STEPS = 2  # the second step runs over the cache the first leaves, as the plan's replay does
STATUSES = ("ok", "out_of_memory", "failed", "timed_out", "skipped")
STEP_STATUSES = ("ok", "failed", "timed_out", "skipped")

EVERY_TECHNIQUE = ["--sharding", "zero3", "--offload-params", "--offload-optimizer", "--checkpoint", "full",
                   "--offload-checkpoints", "--mlp-tiles", "4", "--loss-tiles", "4", "--head-chunk", "1"]
CKPT_TILES_HC8 = ["--checkpoint", "full", "--mlp-tiles", "4", "--loss-tiles", "8", "--head-chunk", "8"]


def row(name, model, seq, knobs=(), longest=None, only=None, why=""):
    """A ladder row: `seq` tokens, or the longest length `max-context` answers with the
    techniques `longest` (a --techniques list); `only` names the one device it runs on."""
    return {"name": name, "model": model, "seq": seq, "knobs": list(knobs), "longest": longest, "only": only, "why": why}


# In the order they run: what the rows after them add is worth less than what they prove, so
# a deadline cuts the tail. On CUDA every length is one whose two steps take seconds to a
# minute on an H200 (the planner's step time); the 1B and 8B rows each reach the device's limit
# with the techniques named in `longest` (checkpointing only: with every technique on, the
# limit is a step of minutes, docs/gpu-kit.md).
LADDERS = {
    "cuda": [
        row("tiny-every-technique", "tiny-gqa", "32K", EVERY_TECHNIQUE,
            why="every one-GPU technique at once: zero3 with parameters and optimizer offloaded, checkpoints offloaded, tiles, untied"),
        row("1b-16k-plain", "llama-3.2-1b", "16K", why="the H100 row of docs/validation-gpu.md, on an H200"),
        row("1b-64k-ckpt-tiles-hc8", "llama-3.2-1b", "64K", CKPT_TILES_HC8, why="expandable segments off"),
        row("1b-64k-ckpt-tiles-hc8-expandable", "llama-3.2-1b", "64K", CKPT_TILES_HC8 + ["--expandable-segments"],
            only="cuda", why="expandable segments on: the pair of the row above"),
        row("8b-4k-plain", "llama-3.1-8b", "4K", why="nothing on: the model states fill 119 GiB"),
        row("1b-longest-checkpoint", "llama-3.2-1b", None, longest="checkpoint",
            why="max-context's answer with checkpointing alone: the device full"),
        row("8b-16k-ckpt-tiles", "llama-3.1-8b", "16K", ["--checkpoint", "full", "--mlp-tiles", "4", "--loss-tiles", "8"]),
        row("1b-32k-offloads", "llama-3.2-1b", "32K",
            ["--checkpoint", "full", "--offload-checkpoints", "--offload-optimizer", "--mlp-tiles", "8",
             "--loss-tiles", "16", "--head-chunk", "4"],
            why="checkpoints and optimizer in pinned host memory on a real model"),
    ],
    # The CPU virtual device counts every byte: the same flow on tiny shapes, seconds a row.
    "cpu": [
        row("tiny-plain-2k", "tiny-gqa", "2K"),
        row("tiny-every-technique-4k", "tiny-gqa", "4K", EVERY_TECHNIQUE),
        row("tiny-expandable", "tiny-gqa", "2K", ["--expandable-segments"], only="cuda",
            why="expandable segments are a CUDA allocator setting"),
        row("tiny-odd-longest-checkpoint", "tiny-odd", None, longest="checkpoint"),
    ],
}

# The max-context check: the answer must fit and one granule more must not. The technique
# sets are tried in this order and the first whose two runs fit in the time left is run;
# each one's answer and predicted step time is recorded either way.
MAX_CONTEXT = {
    "cuda": {"model": "llama-3.1-8b", "budget": None,
             "techniques": ["all", "checkpoint,offload-checkpoints,tiled-mlp,tiled-loss,untied",
                            "checkpoint,tiled-mlp,tiled-loss", "checkpoint", "none"]},
    # 16 MiB: a budget the tiny model reaches in a few thousand tokens, seconds a run.
    "cpu": {"model": "tiny-gqa", "budget": "16MiB", "techniques": ["all", "checkpoint", "none"]},
}
PRESET = {"cuda": "h200-141gb", "cpu": "cpu"}
# The ladder's device budget: the preset's memory on CUDA; on the CPU virtual device one that
# tiny models fill at lengths of seconds a step (the preset's 1 GiB takes 200K tokens).
LADDER_BUDGET = {"cuda": None, "cpu": "64MiB"}

# Start-up of a run before its first step, until rows have measured it: the process, LibTorch,
# the CUDA context; and drawing the weights on the CPU (init_weights, per parameter).
STARTUP_S = {"cuda": 10.0, "cpu": 3.0}
INIT_S_PER_PARAM = 4e-9


# ---------------------------------------------------------------------------- the document

def doc_path(out):
    return os.path.join(out, DOC)


def load(out):
    with open(doc_path(out)) as f:
        return json.load(f)


def save(out, doc):
    """Whole or not at all: a killed step leaves the previous document."""
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".gpu_kit.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o644)  # mkstemp's 0600 is for secrets; this is a result to read
    os.replace(tmp, doc_path(out))


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------ NVML

class Nvml:
    """NVML through nvidia-ml-py, where it is installed and a driver answers."""

    def __init__(self):
        self.ok, self.reason, self.nv, self.handle = False, "", None, None
        try:
            import pynvml  # nvidia-ml-py
            pynvml.nvmlInit()
            self.nv, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
            self.ok = True
        except Exception as e:  # no module, no driver, no device: each is a reason to record
            self.reason = f"NVML unavailable: {type(e).__name__}: {e}"

    def device(self):
        if not self.ok:
            return {"nvml": self.reason}
        nv, h = self.nv, self.handle
        name = nv.nvmlDeviceGetName(h)
        driver = nv.nvmlSystemGetDriverVersion()
        return {"name": name.decode() if isinstance(name, bytes) else name,
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "memory_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).total)}

    def used(self):
        return int(self.nv.nvmlDeviceGetMemoryInfo(self.handle).used)

    def processes(self):
        try:
            return [(int(p.pid), p.usedGpuMemory) for p in self.nv.nvmlDeviceGetComputeRunningProcesses(self.handle)]
        except Exception:
            return []


class Poller(threading.Thread):
    """Polls the device's memory while a run goes on: the run's process as nvidia-smi lists
    it (its whole usage: context, caching allocator, NCCL, cuBLAS), and the device's total."""

    def __init__(self, nvml, pid, period_s=0.05):
        super().__init__(daemon=True)
        self.nvml, self.pid, self.period_s = nvml, pid, period_s
        self.stop_event = threading.Event()
        self.baseline = nvml.used()
        self.device_peak = self.baseline
        self.process_peak = None
        self.other_processes_peak = None

    def run(self):
        while not self.stop_event.is_set():
            try:
                self.device_peak = max(self.device_peak, self.nvml.used())
                mine, others = None, 0
                for pid, used in self.nvml.processes():
                    if used is None:
                        continue
                    if pid == self.pid:
                        mine = used
                    else:
                        others += used
                if mine is not None:
                    self.process_peak = max(self.process_peak or 0, mine)
                if others:
                    self.other_processes_peak = max(self.other_processes_peak or 0, others)
            except Exception:
                pass
            self.stop_event.wait(self.period_s)

    def finish(self):
        self.stop_event.set()
        self.join(timeout=5)
        return {"nvml_process_bytes": self.process_peak,
                "nvml_device_used_bytes": self.device_peak - self.baseline,
                "nvml_device_baseline_bytes": self.baseline,
                "nvml_other_processes_bytes": self.other_processes_peak}


# ---------------------------------------------------------------------------------- helpers

def cli(longctx, *args, timeout=120):
    return subprocess.run([longctx, *args], capture_output=True, text=True, timeout=timeout)


def host_mem_bytes():
    """What this machine can give a run's host side: MemAvailable, less 4 GiB for everything
    else (the build's page cache is reclaimable and counted as available). Plans use it in
    place of the preset's node (2 TiB for H200 nodes), so a plan that offloads is one this
    machine can run."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    return max(1 * GIB, (avail - 4 * GIB) // GIB * GIB)
    except OSError:
        pass
    return None


def planned_host_memory(doc, given):
    """One host memory for every plan of a run: the first step that plans reads it (after the
    build, whose memory is given back by then) and records it."""
    meta = doc["meta"]
    if given:
        meta["planned_host_memory_bytes"] = given
    elif not meta.get("planned_host_memory_bytes"):
        meta["planned_host_memory_bytes"] = host_mem_bytes()
    return meta["planned_host_memory_bytes"]


def size_arg(n):
    return f"{n // GIB}GiB" if n % GIB == 0 else f"{n // MIB}MiB"


def cluster_args(device, budget=None, host_mem=None):
    a = ["--gpus", "1", "--gpu", PRESET[device]]
    if budget:
        a += ["--budget", budget]
    if host_mem:
        a += ["--host-mem", size_arg(host_mem)]
    return a


def knobs_of(plan):
    """The plan's knobs as `plan` flags: the answer of max-context, planned again at another
    length with the same techniques."""
    p = plan["parallel"]
    k = ["--sharding", p["sharding"], "--ulysses", str(p["ulysses"]), "--checkpoint", p["checkpoint"],
         "--head-chunk", str(p["head_chunk"]), "--mlp-tiles", str(p["mlp_tiles"]), "--loss-tiles", str(p["loss_tiles"]),
         "--micro-batch", str(plan["train"]["micro_batch"])]
    if p.get("ring", 1) > 1:
        k += ["--ring", str(p["ring"])]
    for flag in ("offload_checkpoints", "offload_optimizer", "offload_params"):
        if p.get(flag):
            k.append("--" + flag.replace("_", "-"))
    if plan["cluster"].get("expandable_segments"):
        k.append("--expandable-segments")
    return k


def describe(plan):
    """The techniques a plan runs, in words for the table."""
    p = plan["parallel"]
    t = []
    if p["sharding"] != "none":
        t.append(p["sharding"])
    if p["checkpoint"] != "none":
        t.append("ckpt " + p["checkpoint"])
    if p.get("offload_checkpoints"):
        t.append("ckpt offload")
    if p.get("offload_params"):
        t.append("param offload")
    if p.get("offload_optimizer"):
        t.append("optim offload")
    if p["mlp_tiles"] > 1:
        t.append(f"mlp {p['mlp_tiles']}")
    if p["loss_tiles"] > 1:
        t.append(f"loss {p['loss_tiles']}")
    if p["head_chunk"] > 0:
        t.append(f"head chunk {p['head_chunk']}")
    if plan["cluster"].get("expandable_segments"):
        t.append("expandable")
    return ", ".join(t) or "plain"


def plan_at(longctx, model, seq, knobs, cargs, path):
    """`plan --no-search -o path --json`: exit 0 fits, 3 does not (the file is written either
    way), anything else is an error."""
    r = cli(longctx, "plan", "--model", model, "--seq", str(seq), *cargs, *knobs, "--no-search", "--json", "-o", path)
    if r.returncode not in (0, 3):
        raise RuntimeError(f"longctx plan --model {model} --seq {seq} {' '.join(knobs)} exited {r.returncode}: "
                           f"{r.stderr.strip()[-400:]}")
    with open(path) as f:
        return json.load(f)


def max_context(longctx, model, techniques, cargs):
    r = cli(longctx, "max-context", "--model", model, *cargs, "--techniques", techniques, "--no-ladder", "--json",
            timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"longctx max-context --model {model} --techniques {techniques} exited {r.returncode}: "
                           f"{r.stderr.strip()[-400:]}")
    return json.loads(r.stdout)


def params_of(plan):
    """The model's parameters, from its shape: what drawing the weights costs scales with it."""
    m = plan["model"]
    h, i, v = m["hidden_size"], m["intermediate_size"], m["vocab_size"]
    q, kv = m["num_attention_heads"] * m["head_dim"], m["num_key_value_heads"] * m["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h
    return m["num_hidden_layers"] * layer + v * h * (1 if m.get("tie_word_embeddings") else 2) + h


class Clock:
    """The deadline, and the start-up cost of a run learnt from the rows that ran."""

    def __init__(self, device, deadline):
        self.device, self.deadline = device, deadline
        self.startup = []  # (parameters, seconds before the first step)

    def left(self):
        return self.deadline - time.time() if self.deadline else float("inf")

    def startup_s(self, params):
        if not self.startup:
            return STARTUP_S[self.device] + INIT_S_PER_PARAM * params
        # The largest model measured so far sets the cost per parameter; the smallest the base.
        base = min(s for _, s in self.startup)
        big_p, big_s = max(self.startup)
        # Tiny models say nothing of the cost a parameter: keep the default until a real one ran.
        per_param = max(INIT_S_PER_PARAM / 4, (big_s - base) / big_p) if big_p >= 1e8 else INIT_S_PER_PARAM
        return base + per_param * params

    def estimate(self, plan, steps, runs=1):
        """Seconds `runs` runs of this plan take: start-up plus the predicted steps, the first
        step counted twice (allocator warm-up, cuBLAS and kernel selection)."""
        step = plan["prediction"]["step_time_s"]
        return runs * (self.startup_s(params_of(plan)) + (steps + 1) * step)

    def learn(self, plan, wall_s, step_times):
        if step_times:
            self.startup.append((params_of(plan), max(0.0, wall_s - sum(step_times))))


def parse_oom(text):
    """What an out-of-memory error says it asked for: CUDA's caching allocator ('Tried to
    allocate 2.00 GiB ... of which 1.19 GiB is free') or the CPU virtual device's ('2.88 MiB
    requested with 29.80 MiB in use, budget 32.00 MiB')."""
    if re.search(r"out of memory|OutOfMemory", text, re.I) is None:
        return None
    o = {"message": text.strip().splitlines()[-1][:600] if text.strip() else ""}
    m = re.search(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)", text)
    if m:
        o["requested"] = m.group(1)
    m = re.search(r"of which ([0-9.]+ [KMGT]?i?B) is free", text)
    if m:
        o["free"] = m.group(1)
    m = re.search(r"([0-9.]+ [KMGT]iB) requested with ([0-9.]+ [KMGT]iB) in use, budget ([0-9.]+ [KMGT]iB)", text)
    if m:
        o["requested"], o["in_use"], o["budget"] = m.groups()
    return o


RUNNING = []  # the run in flight, which a SIGTERM to this driver takes down with it
IN_FLIGHT = {}  # the document and the row being measured, written down if the driver is stopped


def stop_runs(signum, _frame):
    """The step's timeout ends this driver with SIGTERM: its run, in a session of its own so
    that its whole group can be killed, must not go on holding the GPU for the next step; the
    row it was measuring is recorded as stopped."""
    for p in RUNNING:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if IN_FLIGHT:
        row = IN_FLIGHT["row"]
        row["status"], row["reason"] = "timed_out", "stopped with its step when the step's time ran out"
        IN_FLIGHT["doc"]["rows"].append(row)
        save(IN_FLIGHT["out"], IN_FLIGHT["doc"])
    sys.exit(128 + signum)


def run_plan(longctx, plan_path, device, steps, timeout_s, nvml, log):
    """`longctx run` under a timeout, NVML polled beside it; its whole process group is killed
    when the time is up. Returns (status, run JSON or None, the poller's figures, stderr, wall)."""
    args = [longctx, "run", "--plan", plan_path, "--steps", str(steps), "--device", device, "--json"]
    t0 = time.time()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    RUNNING.append(p)
    poller = None
    if device == "cuda" and nvml.ok:
        poller = Poller(nvml, p.pid)
        poller.start()
    try:
        out, err = p.communicate(timeout=max(1.0, timeout_s))
        status = "ok" if p.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        status = "timed_out"
    RUNNING.remove(p)
    wall = time.time() - t0
    polled = poller.finish() if poller else {}
    log.write(f"--- {' '.join(args)}: exit {p.returncode}, {wall:.1f} s\n{err}\n")
    log.flush()
    result = None
    if status == "ok":
        try:
            result = json.loads(out)
        except json.JSONDecodeError:
            status, err = "failed", err + "\nrun --json printed no JSON"
    elif status == "failed" and parse_oom(err):
        status = "out_of_memory"
    return status, result, polled, err, wall


def rel(measured, predicted):
    if measured is None or not predicted:
        return None
    return (measured - predicted) / predicted


def tokens(seq):
    """A length as the rows write it (an int, or '16K') in tokens."""
    if seq is None or isinstance(seq, int):
        return seq
    return int(seq[:-1]) * 1024 if seq.endswith("K") else int(seq)


def new_row(name, step, model, seq=None, techniques="", knobs="", why="", status="skipped", reason=None):
    """A row of the document (docs/gpu-kit.md): every key present in every row."""
    return {"name": name, "step": step, "model": model, "seq": tokens(seq), "parameters": None, "techniques": techniques,
            "knobs": knobs, "why": why, "steps": 0, "status": status, "reason": reason,
            "predicted": None, "measured": None, "error": None, "out_of_memory": None}


def measure(longctx, plan, plan_path, name, step, device, clock, nvml, log, why="", steps=STEPS):
    """One row of the table: the plan's prediction, then its run if there is time for it."""
    pred = plan["prediction"]
    r = new_row(name, step, plan["model"]["name"], plan["train"]["seq"], describe(plan), " ".join(knobs_of(plan)), why)
    r.update({
        "parameters": params_of(plan), "steps": steps,
        "predicted": {"allocated_bytes": pred["peak_device_bytes"], "reserved_bytes": pred["peak_reserved_bytes"],
                      "nvidia_smi_bytes": pred["peak_nvidia_smi_bytes"], "host_bytes": pred["peak_host_bytes"],
                      "step_time_s": pred["step_time_s"], "fits": bool(pred["feasible"]),
                      "budget_bytes": plan["cluster"]["device_budget_bytes"]},
    })
    need = clock.estimate(plan, steps)
    left = clock.left()
    if need > left:
        r["reason"] = (f"time: about {need:.0f} s needed (start-up and {steps} steps of {pred['step_time_s']:.2f} s "
                       f"predicted), {max(0.0, left):.0f} s left before the deadline")
        return r
    timeout = min(left, max(60.0, 3 * need))
    IN_FLIGHT["row"] = r
    status, res, polled, err, wall = run_plan(longctx, plan_path, device, steps, timeout, nvml, log)
    IN_FLIGHT.pop("row", None)
    r["status"] = status
    if status == "timed_out":
        r["reason"] = f"stopped after {timeout:.0f} s (about {need:.0f} s estimated)"
    elif status == "out_of_memory":
        r["out_of_memory"] = parse_oom(err)
        r["reason"] = r["out_of_memory"]["message"]
    elif status == "failed":
        r["reason"] = (err.strip().splitlines() or ["no output"])[-1][:600]
    if res is not None:
        m = res["measured"]
        times = [s["time_s"] for s in res["steps"]]
        clock.learn(plan, wall, times)
        r["measured"] = {
            "allocated_bytes": m["peak_device_bytes"],
            # On the CPU virtual device nothing is cached: reserved is allocated, as the plan says.
            "reserved_bytes": m.get("peak_device_reserved_bytes") or (m["peak_device_bytes"] if device == "cpu" else None),
            "host_bytes": m["peak_host_bytes"],
            "driver_in_use_bytes": m.get("device_in_use_driver_bytes"),
            "step_time_s": times[-1], "first_step_time_s": times[0], "wall_s": round(wall, 3),
            "prediction_drift": len(res.get("prediction_drift") or []),
            "device": res.get("device"),
        }
        r["measured"].update(polled)
        smi = polled.get("nvml_process_bytes")
        source = "nvml process"
        if smi is None and polled:
            smi, source = polled.get("nvml_device_used_bytes"), "nvml device used less the idle baseline"
        if device == "cpu":
            smi, source = r["measured"]["reserved_bytes"], "the virtual device has no context: its peak"
        r["measured"]["nvidia_smi_bytes"], r["measured"]["nvidia_smi_source"] = smi, source
        r["error"] = {"allocated": rel(r["measured"]["allocated_bytes"], pred["peak_device_bytes"]),
                      "reserved": rel(r["measured"]["reserved_bytes"], pred["peak_reserved_bytes"]),
                      "nvidia_smi": rel(smi, pred["peak_nvidia_smi_bytes"]),
                      "step_time": rel(times[-1], pred["step_time_s"])}
    elif status != "skipped":
        r["measured"] = {"wall_s": round(wall, 3)}
    return r


# ------------------------------------------------------------------------------ subcommands

def cmd_init(a):
    os.makedirs(a.out, exist_ok=True)
    nvml = Nvml() if a.device == "cuda" else None
    meta = {
        "date": now_utc(), "commit": a.commit or "unknown", "device": a.device, "preset": PRESET[a.device],
        "machine": {"cores": os.cpu_count(), "host_memory_available_bytes": host_mem_bytes(),
                    "python": platform.python_version(), "platform": platform.platform()},
        "gpu": nvml.device() if nvml else None,
        "planned_host_memory_bytes": None,  # set by the first step that plans
        "kit": None,
    }
    if a.manifest and os.path.exists(a.manifest):
        with open(a.manifest) as f:
            meta["kit"] = [line.split("\t")[:2] for line in f if line.strip() and not line.startswith("#")]
    doc = {"schema": SCHEMA, "meta": meta, "steps": [], "ctest": None, "rows": [], "max_context": None,
           "multi_gpu": None}
    save(a.out, doc)


def cmd_step(a):
    doc = load(a.out)
    if a.status not in STEP_STATUSES:
        print(f"step: STATUS must be one of {', '.join(STEP_STATUSES)}, found {a.status!r}", file=sys.stderr)
        sys.exit(2)
    doc["steps"] = [s for s in doc["steps"] if s["name"] != a.name]
    doc["steps"].append({"name": a.name, "status": a.status, "seconds": round(float(a.seconds), 1),
                         "detail": a.detail or ""})
    if a.name == "multi_gpu":
        doc["multi_gpu"] = {"status": a.status, "reason": a.detail}
    if a.meta:
        k, _, v = a.meta.partition("=")
        doc["meta"][k] = v
    save(a.out, doc)


def skip_reason(text):
    """gtest prints 'file:line: Skipped' and the reason on the lines after it."""
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") or line.strip() == "Skipped":
            reason = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("[  SKIPPED ]") or nxt.startswith("["):
                    break
                reason.append(nxt.strip())
            return " ".join(r for r in reason if r) or "skipped (no reason printed)"
    return None


def cmd_ctest(a):
    doc = load(a.out)
    tests = []
    for path in a.junit:
        if not os.path.exists(path):
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            status = case.get("status") or "run"
            out = "".join(e.text or "" for e in case.iter("system-out"))
            t = {"name": case.get("name"), "seconds": float(case.get("time") or 0)}
            if case.find("failure") is not None or status == "fail":
                t["status"], t["reason"] = "failed", (out.strip().splitlines() or [""])[-1][:400]
            elif case.find("skipped") is not None or status in ("notrun", "disabled"):
                t["status"], t["reason"] = "skipped", skip_reason(out) or (case.find("skipped").get("message")
                                                                          if case.find("skipped") is not None else status)
            else:
                t["status"], t["reason"] = "passed", None
            tests.append(t)
    counts = {s: sum(t["status"] == s for t in tests) for s in ("passed", "failed", "skipped")}
    doc["ctest"] = {"label": "gpu", "tests": tests, **counts}
    save(a.out, doc)
    print(f"ctest -L gpu: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")


def cmd_ladder(a):
    doc = load(a.out)
    clock = Clock(a.device, a.deadline)
    nvml = Nvml() if a.device == "cuda" else None
    host = planned_host_memory(doc, a.host_mem)
    version = cli(a.longctx, "--version")
    doc["meta"]["longctx_version"] = (version.stdout + version.stderr).strip()
    work = a.work or tempfile.mkdtemp(prefix="gpu-ladder-")
    os.makedirs(work, exist_ok=True)
    wanted = set(a.rows.split(",")) if a.rows else None
    IN_FLIGHT.update(doc=doc, out=a.out)
    with open(os.path.join(a.out, "ladder.log"), "a") as log:
        for spec in LADDERS[a.device]:
            if wanted is not None and spec["name"] not in wanted:
                continue
            doc["rows"] = [r for r in doc["rows"] if r["name"] != spec["name"]]
            if spec["only"] and spec["only"] != a.device:
                doc["rows"].append(new_row(spec["name"], "ladder", spec["model"], spec["seq"], " ".join(spec["knobs"]),
                                           " ".join(spec["knobs"]), spec["why"], "skipped",
                                           f"{spec['why']}: runs on --device {spec['only']} only"))
                save(a.out, doc)
                continue
            cargs = cluster_args(a.device, LADDER_BUDGET[a.device], host)
            path = os.path.join(work, spec["name"] + ".plan.json")
            try:
                knobs, seq, why = spec["knobs"], spec["seq"], spec["why"]
                if spec["longest"]:
                    mc = max_context(a.longctx, spec["model"], spec["longest"], cargs)
                    knobs, seq = knobs_of(mc["plan"]), mc["max_tokens"]
                    why = (why + "; " if why else "") + f"max-context --techniques {spec['longest']}: {seq} tokens"
                plan = plan_at(a.longctx, spec["model"], seq, knobs, cargs, path)
                r = measure(a.longctx, plan, path, spec["name"], "ladder", a.device, clock, nvml, log, why)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                r = new_row(spec["name"], "ladder", spec["model"], spec["seq"], "", " ".join(spec["knobs"]),
                            spec["why"], "failed", str(e)[:600])
            doc["rows"].append(r)
            save(a.out, doc)
            print(f"{r['name']}: {r['status']}" + (f" ({r['reason']})" if r["reason"] else ""), flush=True)


def cmd_max_context(a):
    """max-context's answer must fit and one granule past it must not, on this device."""
    doc = load(a.out)
    spec = MAX_CONTEXT[a.device]
    clock = Clock(a.device, a.deadline)
    nvml = Nvml() if a.device == "cuda" else None
    host = planned_host_memory(doc, a.host_mem)
    cargs = cluster_args(a.device, spec["budget"], host)
    work = a.work or tempfile.mkdtemp(prefix="gpu-max-context-")
    os.makedirs(work, exist_ok=True)
    # The ladder's rows taught the clock what a start-up costs (wall time less the steps).
    for r in doc["rows"]:
        m = r.get("measured") or {}
        if m.get("first_step_time_s") is not None and r.get("parameters") is not None:
            steps_s = m["first_step_time_s"] + m["step_time_s"] * (r["steps"] - 1)
            clock.startup.append((r["parameters"], max(0.0, m["wall_s"] - steps_s)))
    result = {"model": spec["model"], "command": "longctx max-context " + " ".join(["--model", spec["model"], *cargs]),
              "answers": [], "chosen": None, "fits_at_answer": None, "fits_past_answer": None, "verdict": None}
    doc["max_context"] = result
    doc["rows"] = [r for r in doc["rows"] if r["step"] != "max_context"]
    save(a.out, doc)
    IN_FLIGHT.update(doc=doc, out=a.out)
    try:
        check_max_context(a, doc, spec, clock, nvml, cargs, work, result)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        result["verdict"] = f"failed: {e}"[:800]
        save(a.out, doc)
        print(f"max-context check: {result['verdict']}")
        sys.exit(1)


def check_max_context(a, doc, spec, clock, nvml, cargs, work, result):
    with open(os.path.join(a.out, "ladder.log"), "a") as log:
        chosen = None
        for techniques in spec["techniques"]:
            mc = max_context(a.longctx, spec["model"], techniques, cargs)
            at = plan_at(a.longctx, spec["model"], mc["max_tokens"], knobs_of(mc["plan"]), cargs,
                         os.path.join(work, f"answer-{len(result['answers'])}.plan.json"))
            need = clock.estimate(at, STEPS, runs=2)
            answer = {"techniques": techniques, "max_tokens": mc["max_tokens"], "granularity_tokens": mc["granularity_tokens"],
                      "binding": mc["binding"], "plan": describe(mc["plan"]),
                      "predicted_step_time_s": at["prediction"]["step_time_s"], "estimated_check_s": round(need, 1)}
            result["answers"].append(answer)
            if chosen is None and need <= clock.left():
                chosen = (answer, mc, at)
                answer["checked"] = True
                break
            answer["checked"] = False
            answer["why_not_checked"] = (f"its two runs need about {need:.0f} s, {max(0.0, clock.left()):.0f} s left")
        save(a.out, doc)
        if chosen is None:
            result["verdict"] = "not checked: no technique set's two runs fit in the time left"
            save(a.out, doc)
            print(result["verdict"])
            return
        answer, mc, at = chosen
        result["chosen"] = answer["techniques"]
        knobs = knobs_of(mc["plan"])
        rows = []
        for label, seq in (("answer", mc["max_tokens"]), ("answer+granule", mc["max_tokens"] + mc["granularity_tokens"])):
            path = os.path.join(work, f"{label}.plan.json")
            plan = plan_at(a.longctx, spec["model"], seq, knobs, cargs, path)
            name = f"{spec['model'].replace('llama-3.1-', '').replace('llama-3.2-', '')}-max-context-{label}"
            r = measure(a.longctx, plan, path, name, "max_context", a.device, clock, nvml, log,
                        why=f"max-context --techniques {answer['techniques']}: {mc['max_tokens']} tokens, "
                            f"granule {mc['granularity_tokens']}")
            rows.append(r)
            doc["rows"].append(r)
            save(a.out, doc)
        at_r, past_r = rows
        result["fits_at_answer"] = at_r["status"] == "ok" if at_r["status"] in ("ok", "out_of_memory") else None
        result["fits_past_answer"] = past_r["status"] == "ok" if past_r["status"] in ("ok", "out_of_memory") else None
        if result["fits_at_answer"] is None or result["fits_past_answer"] is None:
            result["verdict"] = (f"incomplete: at the answer {at_r['status']}, one granule past it {past_r['status']}")
        elif result["fits_at_answer"] and not result["fits_past_answer"]:
            result["verdict"] = "as predicted: the answer fits, one granule more runs out of memory"
        elif not result["fits_at_answer"]:
            result["verdict"] = f"WRONG: the answer ran out of memory ({at_r['reason']})"
        else:
            m = past_r["measured"]
            cap = (doc["meta"].get("gpu") or {}).get("memory_bytes") or past_r["predicted"]["budget_bytes"]
            smi = m.get("nvidia_smi_bytes") or m.get("reserved_bytes") or 0
            result["headroom_past_answer_bytes"] = cap - smi
            result["verdict"] = (f"one granule past the answer still ran: {smi / GIB:.2f} GiB at its peak of "
                                 f"{cap / GIB:.2f} GiB, {(cap - smi) / GIB:.2f} GiB to spare")
        save(a.out, doc)
        print(f"max-context check: {result['verdict']}")


# ----------------------------------------------------------------------------------- report

def fmt_bytes(n):
    if n is None:
        return "–"
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / MIB:.1f} MiB"


def pair(r, key, fmt):
    p = (r.get("predicted") or {}).get(key)
    m = (r.get("measured") or {}).get(key)
    if p is None and m is None:
        return "–"
    e = (r.get("error") or {}).get({"allocated_bytes": "allocated", "reserved_bytes": "reserved",
                                    "nvidia_smi_bytes": "nvidia_smi", "step_time_s": "step_time"}[key])
    s = f"{fmt(m) if m is not None else '–'} / {fmt(p) if p is not None else '–'}"
    return s + (f" ({100 * e:+.1f}%)" if e is not None else "")


def markdown(doc):
    meta = doc["meta"]
    gpu = meta.get("gpu") or {}
    out = []
    where = (f"{gpu.get('name')} ({fmt_bytes(gpu.get('memory_bytes'))}, driver {gpu.get('driver')})" if gpu.get("name")
             else "the CPU virtual device" if meta["device"] == "cpu" else f"no GPU named ({gpu.get('nvml', '')})")
    out.append(f"GPU kit run of {meta['date']}, commit {meta['commit']}, on {where}; preset {meta['preset']}, "
               f"{meta['machine']['cores']} cores, plans with {fmt_bytes(meta.get('planned_host_memory_bytes'))} host memory.")
    out.append("")
    out.append("| step | status | seconds | detail |")
    out.append("| --- | --- | ---: | --- |")
    for s in doc["steps"]:
        out.append(f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {s['detail']} |")
    c = doc.get("ctest")
    if c:
        out.append("")
        out.append(f"`ctest -L gpu`: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped.")
        for t in c["tests"]:
            if t["status"] == "failed":
                out.append(f"- FAILED {t['name']}: {t['reason']}")
        reasons = {}
        for t in c["tests"]:
            if t["status"] == "skipped":
                reasons.setdefault(t["reason"], []).append(t["name"])
        for reason, names in reasons.items():
            out.append(f"- skipped ({len(names)}): {reason}")
    out.append("")
    out.append("| row | model, seq | techniques | allocated, measured / predicted | reserved | nvidia-smi | "
               "step s | status |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in doc["rows"]:
        status = r["status"] + (f": {r['reason']}" if r.get("reason") else "")
        out.append(f"| {r['name']} | {r['model']} {r['seq'] if r['seq'] is not None else ''} | {r['techniques']} | "
                   f"{pair(r, 'allocated_bytes', fmt_bytes)} | {pair(r, 'reserved_bytes', fmt_bytes)} | "
                   f"{pair(r, 'nvidia_smi_bytes', fmt_bytes)} | {pair(r, 'step_time_s', lambda v: f'{v:.2f}')} | "
                   f"{status} |")
    mc = doc.get("max_context")
    if mc:
        out.append("")
        out.append(f"max-context check ({mc['command']}): {mc['verdict']}")
        for ans in mc["answers"]:
            note = "checked" if ans.get("checked") else f"not run: {ans.get('why_not_checked', '')}"
            out.append(f"- `--techniques {ans['techniques']}`: {ans['max_tokens']} tokens (granule "
                       f"{ans['granularity_tokens']}, {ans['binding']} binds), {ans['plan']}; "
                       f"{ans['predicted_step_time_s']:.1f} s a step predicted; {note}")
    if doc.get("multi_gpu"):
        out.append("")
        out.append(f"Several GPUs: {doc['multi_gpu']['status']}: {doc['multi_gpu']['reason']}")
    return "\n".join(out) + "\n"


def cmd_report(a):
    doc = load(a.out)
    text = markdown(doc)
    with open(os.path.join(a.out, TABLE), "w") as f:
        f.write(text)
    print(text, end="")


# ------------------------------------------------------------------------------------ check

def check(doc, min_measured=0):
    """The schema of docs/gpu-kit.md: a list of problems, each naming its field."""
    problems = []

    def need(obj, key, types, where):
        if not isinstance(obj, dict) or key not in obj:
            problems.append(f"{where}.{key}: missing")
            return None
        v = obj[key]
        if not isinstance(v, types) or (isinstance(v, bool) and types is not bool):
            want = {dict: "an object", list: "a list", str: "a string"}.get(types, "a number")
            problems.append(f"{where}.{key}: must be {want}, found {type(v).__name__} {v!r}"[:200])
            return None
        return v

    if doc.get("schema") != SCHEMA:
        problems.append(f"schema: must be {SCHEMA!r}, found {doc.get('schema')!r}")
    meta = need(doc, "meta", dict, "$")
    if meta:
        for k in ("date", "commit", "device", "preset"):
            need(meta, k, str, "meta")
        need(meta, "machine", dict, "meta")
    for i, s in enumerate(need(doc, "steps", list, "$") or []):
        if need(s, "name", str, f"steps[{i}]") is not None and s.get("status") not in STEP_STATUSES:
            problems.append(f"steps[{i}].status: must be one of {STEP_STATUSES}, found {s.get('status')!r}")
        need(s, "seconds", (int, float), f"steps[{i}]")
    measured_rows = 0
    num = (int, float)
    for i, r in enumerate(need(doc, "rows", list, "$") or []):
        w = f"rows[{i}]"
        need(r, "name", str, w)
        if r.get("step") not in ("ladder", "max_context"):
            problems.append(f"{w}.step: must be 'ladder' or 'max_context', found {r.get('step')!r}")
        if r.get("status") not in STATUSES:
            problems.append(f"{w}.status: must be one of {STATUSES}, found {r.get('status')!r}")
        if r.get("status") != "ok" and not r.get("reason"):
            problems.append(f"{w}.reason: a row that is not ok says why")
        if r.get("status") == "ok":
            p = need(r, "predicted", dict, w)
            m = need(r, "measured", dict, w)
            e = need(r, "error", dict, w)
            if p and m and e:
                measured_rows += 1
                for k in ("allocated_bytes", "reserved_bytes", "nvidia_smi_bytes", "step_time_s"):
                    pv, mv = need(p, k, num, w + ".predicted"), need(m, k, num, w + ".measured")
                    if pv is not None and pv <= 0:
                        problems.append(f"{w}.predicted.{k}: must be positive, found {pv}")
                    if mv is not None and mv <= 0:
                        problems.append(f"{w}.measured.{k}: must be positive, found {mv}")
                    ek = {"allocated_bytes": "allocated", "reserved_bytes": "reserved",
                          "nvidia_smi_bytes": "nvidia_smi", "step_time_s": "step_time"}[k]
                    ev = need(e, ek, num, w + ".error")
                    if None not in (pv, mv, ev) and pv > 0 and abs(ev - (mv - pv) / pv) > 1e-9:
                        problems.append(f"{w}.error.{ek}: {ev} is not (measured - predicted) / predicted")
                need(m, "host_bytes", num, w + ".measured")
    if measured_rows < min_measured:
        problems.append(f"rows: {measured_rows} measured beside their prediction, at least {min_measured} expected")
    mc = doc.get("max_context")
    if mc is not None:
        need(mc, "answers", list, "max_context")
        need(mc, "verdict", str, "max_context")
    return problems


def cmd_check(a):
    with open(a.file) as f:
        doc = json.load(f)
    problems = check(doc, a.min_measured)
    for p in problems:
        print(f"{a.file}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"{a.file}: schema {SCHEMA}, {len(doc['rows'])} rows, "
          f"{sum(r['status'] == 'ok' for r in doc['rows'])} measured beside their prediction")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("out")
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--commit")
    p.add_argument("--manifest")
    p.set_defaults(f=cmd_init)
    p = sub.add_parser("step")
    p.add_argument("out")
    p.add_argument("name")
    p.add_argument("status")
    p.add_argument("seconds")
    p.add_argument("--detail")
    p.add_argument("--meta", help="KEY=VALUE recorded under meta")
    p.set_defaults(f=cmd_step)
    p = sub.add_parser("ctest")
    p.add_argument("out")
    p.add_argument("junit", nargs="+")
    p.set_defaults(f=cmd_ctest)
    for name, f in (("ladder", cmd_ladder), ("max-context", cmd_max_context)):
        p = sub.add_parser(name)
        p.add_argument("out")
        p.add_argument("--longctx", required=True)
        p.add_argument("--device", choices=("cuda", "cpu"), required=True)
        p.add_argument("--deadline", type=float, help="seconds since the epoch by which the step ends")
        p.add_argument("--host-mem", type=int, help="host memory the plans may use, in bytes (default: MemAvailable less 4 GiB)")
        p.add_argument("--work", help="folder for plan files (default: a temporary one)")
        if name == "ladder":
            p.add_argument("--rows", help="comma-separated row names (default: all of the device's)")
        p.set_defaults(f=f)
    p = sub.add_parser("report")
    p.add_argument("out")
    p.set_defaults(f=cmd_report)
    p = sub.add_parser("check")
    p.add_argument("file")
    p.add_argument("--min-measured", type=int, default=0)
    p.set_defaults(f=cmd_check)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, stop_runs)
    a.f(a)


if __name__ == "__main__":
    main()
