"""The planner's Python API: thin typed wrappers over longctx._core.

Every function builds the request the CLI would build from its flags, asks the C++ planner,
and reads back the JSON the CLI prints with ``--json``; nothing is computed twice.
"""
from __future__ import annotations

import json
import operator
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from . import _core

#: A model: a preset name (see :func:`models`), the path of a Hugging Face config.json or of a
#: folder holding one, a config as a dict, or a ``transformers.PretrainedConfig``.
ModelSpec = Union[str, "os.PathLike[str]", Mapping[str, Any], Any]


class LongctxError(Exception):
    """An answer the planner refused. ``field`` names the input (as the CLI's flag or the
    config.json key), ``message`` says what is wrong and how to fix it."""

    exit_status = 1

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def __reduce__(self):
        # Rebuilt from both parts: the default pickling passes the one joined string, and an
        # error raised in a multiprocessing worker then hung the pool that unpickled it.
        return (type(self), (self.field, self.message))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and (self.field, self.message) == (other.field, other.message)

    def __hash__(self) -> int:
        return hash((type(self), self.field, self.message))


class BadInput(LongctxError, ValueError):
    """A bad argument or config field (the CLI exits 2)."""

    exit_status = 2


class NoFit(LongctxError):
    """No plan fits the budgets (the CLI exits 3)."""

    exit_status = 3


_ERRORS = {"bad_input": BadInput, "no_fit": NoFit, "internal": LongctxError}

#: Keys of an answer that are not part of the plan file: the search's summary, the stacks
#: whose files run the plan, and what positions past max_position_embeddings need.
_ANSWER_ONLY_KEYS = ("search", "exports", "positions")

#: The answer's keys derived from the plan itself: read back from a file or a dict, they are
#: ignored (planner/io/plan_keys.cpp kTopKeys; docs/robustness.md) and worked out afresh, as
#: a file edited after they were written would otherwise report another plan's.
_DERIVED_KEYS = ("exports", "positions")


def _answer(result: "tuple[bool, str]") -> str:
    ok, payload = result
    if ok:
        return payload
    e = json.loads(payload)
    raise _ERRORS.get(e["kind"], LongctxError)(e["field"], e["message"])


#: The largest GPU count the planner takes (planner/core/limits.h, kMaxGpus).
_MAX_GPUS = 1 << 20

#: The most rows `explain --live` takes: the option is a C++ int.
_MAX_LIVE_ROWS = (1 << 31) - 1


def _text(name: str, value: Any) -> str:
    """`value` when it is a str; BadInput naming the argument otherwise (None included)."""
    if not isinstance(value, str):
        raise BadInput(name, f"{value!r} is not a string")
    if "\x00" in value:  # C++ would read it up to the NUL: "cfg/config.json\0junk" planned cfg/config.json
        raise BadInput(name, f"{value!r} holds a NUL character; give the text without it")
    try:  # the binding passes UTF-8: a lone surrogate ("\udc80", from a path decoded with surrogateescape) has none
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(name, f"{value!r} is not valid Unicode (a lone surrogate); give the text as UTF-8") from None
    return value


def _value(name: str, value: Any, *, required: bool = False) -> str:
    """A value the CLI takes as a flag's text (``seq``, ``gpu``, a budget, a setting, a text
    knob), held to _text's rules and to the rule the CLI holds every flag's value to
    (cli/common/parse_values.h, ``value_rules::any_value``): not blank, no control character
    (an escape sequence would reach the terminal in the message echoing it), no spaces around
    it (``'1024 '``, which the CLI refuses where a quoted shell argument carries it).
    `required`: an argument without a default (``required_value``)."""
    text = _text(name, value)
    if not text.strip(" \t"):
        raise BadInput(name, "is empty; give a value (the argument has no default)" if required
                       else "is empty; give a value, or leave it out for its default")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise BadInput(name, "holds a control character; write the value in plain text")
    if text[0] in " \t" or text[-1] in " \t":
        raise BadInput(name, f"{text!r} has spaces around it; write the value without them")
    return text


def _keyword(name: str) -> str:
    """A keyword argument's name as an error's field: a lone surrogate (``**{"\\udc80": 1}``)
    or a control character written as its escape, as repr() writes it, so that the field crosses
    the binding as UTF-8 and prints as the text it was."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _path(name: str, value: Any) -> str:
    """A path argument: a str or an os.PathLike (bytes decoded as the OS names files), held to
    _text's rules; BadInput naming the argument otherwise (None, a number, a file object)."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise BadInput(name, f"{value!r} is not a path; give a str or a pathlib.Path")
    try:
        path = os.fspath(value)
    except TypeError as e:  # a PathLike whose __fspath__ returns neither str nor bytes
        raise BadInput(name, f"{value!r} is not a path ({e})") from None
    return _text(name, os.fsdecode(path) if isinstance(path, bytes) else path)


def _boolean(value: Any) -> bool:
    """A bool, numpy's bool_ or a torch bool tensor: the last two have ``__index__`` (a torch
    bool tensor's is 1 or 0), but a bool is no count (docs/python.md)."""
    if isinstance(value, bool):
        return True
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "kind", None) == "b" or str(dtype) == "torch.bool"


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadInput(name, f"{value!r} is not True or False")
    return value


def _whole(name: str, value: Any, refusal: str) -> int:
    """`value` as an int where it is one by Python's own rule (``operator.index``: an int, a
    numpy or torch integer); BadInput naming `name`, "VALUE {refusal}", otherwise: a bool is no
    count, and a float or a numeric string is never truncated or parsed."""
    if not _boolean(value):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise BadInput(name, f"{value!r} {refusal}")


def _count(name: str, value: Any, high: int = _MAX_GPUS, *, optional: bool = False) -> Optional[int]:
    """An int (bool is not a count) of at most `high` in size; None where `optional`. Its range
    (1 or more) is the planner's rule, refused there naming the flag as the command line does;
    sizes the binding cannot carry are refused here."""
    if value is None and optional:
        return None
    value = _whole(name, value, "is not a count; give an int of 1 or more")
    if not -high <= value <= high:
        raise BadInput(name, f"{value} is outside 1..{high}")
    return value


def _techniques(value: Any) -> str:
    if isinstance(value, str):
        return _value("techniques", value)
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        names = list(value)
        if all(isinstance(t, str) for t in names):
            for t in names:
                _value("techniques", t)
            return _text("techniques", ",".join(names))
    raise BadInput("techniques", f"{value!r} is not 'all', 'none', a comma list or a list of technique names")


def _plain(value: Any) -> Any:
    """A numpy or torch scalar or array as the Python value it holds (``np.int64(64)`` -> 64,
    not the text "64" a config's integer field refuses); TypeError for anything else."""
    if callable(getattr(value, "tolist", None)):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _json_text(name: str, value: Any, *, others_as_text: bool = False) -> str:
    """`value` (a config or a plan as a dict) as JSON text, numpy and torch numbers as numbers;
    with `others_as_text` any other object as its str (what a PretrainedConfig's to_dict may
    hold). What JSON cannot write raises BadInput naming `name`, not a RecursionError,
    ValueError or TypeError from json."""
    def default(o: Any) -> Any:
        try:
            return _plain(o)
        except TypeError:
            if others_as_text:
                return str(o)
            raise
    try:
        return json.dumps(value, default=default)
    except RecursionError:
        raise BadInput(name, "nests deeper than JSON is read (the planner reads 64 levels); give the config's "
                             "own keys, as its config.json holds them") from None
    except (TypeError, ValueError) as e:  # a key that is not text, a value that refers to itself
        raise BadInput(name, f"cannot be written as JSON ({e}); give text keys and values JSON holds") from None


def _model_source(name_or_path: Any) -> Optional[str]:
    """The absolute folder a config was read from (its ``_name_or_path``) where that names a
    folder that exists, as the CLI records a model folder (model_lookup.cpp model_from_path:
    the source absolute, launch.sh loads it from anywhere); None for a Hub id or a name."""
    if isinstance(name_or_path, (str, os.PathLike)) and name_or_path:
        try:
            if os.path.isdir(name_or_path):
                return os.path.abspath(name_or_path)
        except (ValueError, TypeError, UnicodeError):  # a NUL, bytes os cannot take: not a folder
            pass
    return None


def _config_args(config: Any, name_or_path: Any, args: "_core.ClusterRequest") -> None:
    """A config as a dict, read from `name_or_path` (a Hub id, a folder, or nothing): its name
    and its JSON. Where `name_or_path` is a folder that exists, the model is named and sourced
    as the CLI's --model FOLDER: the folder's name, its absolute path as ``_name_or_path``."""
    folder = _model_source(name_or_path)
    if folder is not None and isinstance(config, Mapping):
        config = {**config, "_name_or_path": folder}
        name_or_path = os.path.basename(folder)
    model_type = config.get("model_type") if isinstance(config, Mapping) else None
    args.model = _text("model", str(name_or_path or model_type or "model"))
    args.model_config_json = _json_text("model", config, others_as_text=True)


def _model_args(model: ModelSpec, args: "_core.ClusterRequest") -> None:
    if hasattr(model, "to_dict") and callable(model.to_dict):  # transformers.PretrainedConfig
        try:
            config = model.to_dict()
        except Exception as e:  # the object's own error, named as an input the planner cannot read
            raise BadInput("model", f"its to_dict() raised {type(e).__name__}: {e}; give a config that converts, "
                                    "or its dict or config.json") from e
        _config_args(config, getattr(model, "name_or_path", ""), args)
        return
    if isinstance(model, Mapping):
        _config_args(dict(model), model.get("_name_or_path"), args)
        return
    if not isinstance(model, (str, os.PathLike)):
        raise BadInput("model", f"cannot use a {type(model).__name__}; give a preset name, a config.json path or "
                                "folder, a dict, or a transformers.PretrainedConfig")
    # A folder is the planner's to read (model_lookup.cpp model_from_path), as the CLI's
    # --model: a config.json that is a FIFO, a folder, a device or a link loop is named as
    # such; only a missing one "holds no config.json".
    args.model = _path("model", model)


def _bytes_text(value: Union[int, str, None], name: str = "budget") -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        if not _text(name, value).strip():
            raise BadInput(name, "is empty; give a size such as '80GiB', or leave it out for the preset's")
        return _value(name, value)
    size = _whole(name, value, "is not a size; give bytes as an int or text such as '80GiB'")
    return f"{size}B"


def _settings(args: "_core.ClusterRequest", given: Dict[str, Any]) -> None:
    """Moves the settings (the stack, its options, the dtypes: the planner's settings table)
    out of ``given`` into the request, by their keywords; ``None`` is the default."""
    for keyword, attribute, kind, negated in _core.settings():
        if keyword not in given:
            continue
        value = given.pop(keyword)
        if value is None:
            continue
        if kind == "switch":
            # A negated switch (hf_use_cache: the flag says --hf-no-use-cache) is checked as
            # every switch is: "false" read backwards planned the opposite setting.
            on = _flag(keyword, value)
            setattr(args, attribute, (not on) if negated else on)
        elif not _text(keyword, value).strip():
            raise BadInput(keyword, "is empty; give one of its values, or leave it out (None) for the default")
        else:
            setattr(args, attribute, _value(keyword, value))


def _cluster(model: ModelSpec, gpus: int, gpu: str, budget, host_mem, techniques, gpus_per_node,
             expandable_segments: bool, settings: Dict[str, Any]) -> "_core.ClusterRequest":
    args = _core.ClusterRequest()
    _model_args(model, args)
    args.gpus = _count("gpus", gpus)
    args.gpus_per_node = _count("gpus_per_node", gpus_per_node, optional=True)
    args.gpu = _value("gpu", gpu)
    args.budget = _bytes_text(budget, "budget")
    args.host_mem = _bytes_text(host_mem, "host_mem")
    args.techniques = _techniques(techniques)
    args.expandable_segments = _flag("expandable_segments", expandable_segments)
    _settings(args, settings)
    return args


def setting_keywords() -> List[str]:
    """The settings :func:`plan` and :func:`max_context` take as keywords (the stack, its
    options, the dtypes)."""
    return [keyword for keyword, _, _, _ in _core.settings()]


@dataclass(frozen=True)
class Prediction:
    """What the planner predicts for one training step, per rank."""

    feasible: bool
    peak_device_bytes: int  #: allocated bytes at the device peak (torch.cuda.max_memory_allocated)
    peak_host_bytes: int  #: host bytes at the host peak (per rank)
    peak_at: str  #: the op at the device peak
    step_time_s: float
    tokens_per_s: float
    mfu: float
    binding: str  #: what binds when it does not fit ("" when it fits)
    phases: List[Dict[str, Any]]  #: predicted peaks per phase
    peak_reserved_bytes: int  #: reserved by the caching allocator (torch.cuda.max_memory_reserved)
    peak_nvidia_smi_bytes: int  #: reserved + memory outside the allocator: what nvidia-smi shows, and what binds
    raw: Dict[str, Any] = field(repr=False)  #: the whole prediction block, breakdown included

    @staticmethod
    def _from(j: Mapping[str, Any]) -> "Prediction":
        return Prediction(bool(j["feasible"]), int(j["peak_device_bytes"]), int(j["peak_host_bytes"]), j["peak_at"],
                          float(j["step_time_s"]), float(j["tokens_per_s"]), float(j["mfu"]), j.get("binding", ""),
                          list(j.get("phases", [])), int(j.get("peak_reserved_bytes", j["peak_device_bytes"])),
                          int(j.get("peak_nvidia_smi_bytes", j["peak_device_bytes"])), dict(j))


@dataclass(frozen=True)
class Plan:
    """A plan: the model, the cluster, the sequence, the techniques, and the prediction.

    ``to_json()`` is the plan file ``longctx plan -o`` writes (``longctx run --plan`` runs
    it); ``from_json()`` reads one back."""

    data: Dict[str, Any] = field(repr=False)

    @property
    def prediction(self) -> Prediction:
        """The file's prediction; where it records none, this planner's (as ``explain`` works
        it out)."""
        recorded = self.data.get("prediction")
        if not isinstance(recorded, Mapping):
            recorded = json.loads(_answer(_core.prediction(self.to_json(None))))
        return Prediction._from(recorded)

    @property
    def seq(self) -> int:
        return int(self.data["train"]["seq"])

    @property
    def micro_batch(self) -> int:
        return int(self.data["train"]["micro_batch"])

    @property
    def parallel(self) -> Dict[str, Any]:
        """The techniques, by knob name (``sharding``, ``ulysses``, ``head_chunk``, ...)."""
        return dict(self.data["parallel"])

    @property
    def search(self) -> Optional[Dict[str, Any]]:
        """The search's summary (configurations evaluated, runners-up, Pareto set), if one ran."""
        return self.data.get("search")

    @property
    def exports(self) -> List[Dict[str, Any]]:
        """Which stacks' files run this plan (``longctx export --stack``): one dict a stack, its
        ``stack`` word, ``exports`` True or False, and when False the ``field`` and ``refusal``.
        A plan from :func:`plan` or :func:`max_context` holds the answer's; one read from JSON
        asks the planner (the file's own ``exports`` are ignored, as the CLI ignores them)."""
        if "exports" not in self.data:
            return list(json.loads(_answer(_core.exports(self.to_json(None)))))
        return list(self.data["exports"])

    @property
    def positions(self) -> str:
        """Past the model's max_position_embeddings: what those positions need (``plan
        --json``'s ``"positions"``, :attr:`MaxContext.positions`); "" within it."""
        return _answer(_core.positions(self.to_json(None)))

    @property
    def exportable_by(self) -> List[str]:
        """The ``export --stack`` words whose files run this plan."""
        return [e["stack"] for e in self.exports if e["exports"]]

    def to_json(self, indent: Optional[int] = 2) -> str:
        body = {k: v for k, v in self.data.items() if k not in _ANSWER_ONLY_KEYS}
        return json.dumps(body, indent=indent)

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the plan file as ``longctx plan -o`` does: whole or not at all, through a
        symbolic link to the file it names; a folder, a device or a FIFO raises BadInput."""
        _answer(_core.write_text(_path("path", path), "path", self.to_json() + "\n"))

    @staticmethod
    def load(path: Union[str, "os.PathLike[str]"]) -> "Plan":
        """The plan file at ``path`` (``longctx plan -o``, ``max-context -o``), checked by the planner."""
        # Read as the CLI reads it (common/input_file.h): a FIFO is refused, not waited on, and
        # /dev/zero or a runaway file is never read past the bound.
        ok, payload = _core.read_file(_path("path", path), "plan")
        if not ok:
            _answer((False, payload.decode("utf-8")))
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInput("plan", f"'{path}' is not UTF-8 text ({e.reason} at byte {e.start}); give a plan file") from None
        return Plan.from_json(text)

    @staticmethod
    def from_json(text: Union[str, bytes, Mapping[str, Any]]) -> "Plan":
        """A plan from a plan file's text (or its parsed dict); checked by the planner as
        ``longctx explain`` checks a file (a key given twice, nesting past 64 levels, more than
        64 MiB: BadInput). Its ``exports`` and ``positions`` are worked out again."""
        if isinstance(text, Mapping):
            source = _json_text("plan", dict(text))  # any Mapping (a MappingProxyType, a DictConfig)
        elif isinstance(text, (str, bytes)):
            source = text
            if isinstance(source, bytes):
                try:
                    source = source.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise BadInput("plan", f"is not UTF-8 text ({e.reason} at byte {e.start}); give a plan file") from None
        else:
            raise BadInput("plan", f"cannot read a plan from a {type(text).__name__}; give its text or its dict")
        try:
            size = len(source.encode("utf-8"))
        except UnicodeEncodeError:
            raise BadInput("plan", "is not valid Unicode (a lone surrogate); give a plan file's text") from None
        # The bound the CLI holds a plan file to (common/input_file.h, input_limits::kJsonBytes),
        # which Plan.load meets reading the file; text given here is held to it alike.
        if size > _core.max_json_bytes:
            raise BadInput("plan", f"holds {size} bytes, more than longctx's limit of {_core.max_json_bytes >> 20} MiB "
                                   "for a plan file; give a plan as `longctx plan -o` writes it")
        # The planner reads the text itself, as `longctx explain` reads the file (plan_from_text):
        # a key given twice, nesting past 64 and a UTF-8 byte order mark are its to judge, as a
        # round trip through json.loads would keep one key of two and refuse the mark. It
        # raises BadInput on a bad file and, in the same evaluation, says each recorded figure
        # this planner no longer gives (a file edited, or written by another version), as
        # `longctx explain` says it: .prediction reads the file's. A file without a prediction
        # records nothing to differ.
        notes = _answer(_core.drift(source))
        try:
            data = json.loads(source[1:] if source.startswith("\ufeff") else source)
        except (ValueError, RecursionError) as e:  # what the planner read, json.loads reads too
            raise BadInput("plan", f"is not a plan file's JSON ({e}); give a plan as `longctx plan -o` writes it") from None
        if not isinstance(data, dict):
            raise BadInput("plan", "must be a JSON object, as `longctx plan -o` writes it")
        for key in _DERIVED_KEYS:
            data.pop(key, None)
        if notes:
            warnings.warn("the plan file's prediction differs from this planner's:\n" + notes, stacklevel=2)
        return Plan(data)

    def explain(self, live_rows: int = 12) -> str:
        """Where the memory goes: the summary, the breakdown at the peak and the live set
        there, as ``longctx explain`` prints it."""
        rows = _whole("live_rows", live_rows, "is not a count; give an int of 0 or more rows")
        if rows < 0:  # as `explain --live -1` is refused
            raise BadInput("live_rows", f"{rows} is negative; give 0 or more rows")
        if rows > _MAX_LIVE_ROWS:  # --live is an int: CLI11 refuses 2**31 as out of its range
            raise BadInput("live_rows", f"{rows} is outside 0..{_MAX_LIVE_ROWS}; give 0 or more rows within it")
        return _answer(_core.explain(self.to_json(None), rows))

    def export(self, stack: str) -> Dict[str, str]:
        """The files the training stack ``"arctic"``, ``"hf"``, ``"deepspeed"`` or ``"torchtitan"`` runs this plan
        with, file name -> text (``longctx export --stack``; docs/export.md). Each
        approximation is a ``UserWarning``; a knob the stack cannot run raises BadInput."""
        j = json.loads(_answer(_core.export(self.to_json(None), _value("stack", stack, required=True))))
        for line in j["approximations"]:
            warnings.warn(f"approximation: {line}", stacklevel=2)
        if j["note"]:  # a plan that does not fit: `longctx export`'s note (and its exit 3)
            warnings.warn(f"note: {j['note']}", stacklevel=2)
        return dict(j["files"])

    def __repr__(self) -> str:
        # Never raises and never plans (a logger or a debugger calls it): a plan file may leave
        # out its prediction, which .prediction and explain() work out again.
        try:
            p = Prediction._from(self.data["prediction"])
            figures = f"peak_device_bytes={p.peak_device_bytes}, feasible={p.feasible}"
        except (KeyError, TypeError, ValueError):
            figures = "no prediction recorded"
        try:
            return (f"Plan(model={self.data['model'].get('name', '?')!r}, seq={self.seq}, "
                    f"micro_batch={self.micro_batch}, parallel={self.parallel}, {figures})")
        except (KeyError, TypeError, ValueError, AttributeError):
            return f"Plan({figures})"


@dataclass(frozen=True)
class MaxContext:
    """The longest sequence any allowed plan trains, to ``granularity`` tokens."""

    max_tokens: int
    granularity: int
    binding: str  #: what stops it growing: "device memory", "host memory" or a rule
    rule: str
    plan: Plan  #: the fastest plan at max_tokens
    ladder: List[Dict[str, Any]]  #: the maximum as techniques are added one at a time
    raw: Dict[str, Any] = field(repr=False)
    #: the sequence layout the plan runs (Ulysses, ring, hybrid) and why
    layout: str = ""
    #: with ``stack="all"``: every stack's answer by its word, a MaxContext or the BadInput
    #: saying why the stack cannot run the model on this hardware
    stacks: Dict[str, Union["MaxContext", LongctxError]] = field(default_factory=dict, repr=False)
    #: past the model's max_position_embeddings (``max_positions="extend"``, the default): what
    #: those positions need; "" within it
    positions: str = ""

    @property
    def exports(self) -> List[Dict[str, Any]]:
        """Which stacks' files run the plan (:attr:`Plan.exports`)."""
        return list(self.raw.get("exports", []))

    @staticmethod
    def _from(j: Mapping[str, Any]) -> "MaxContext":
        stacks: Dict[str, Union[MaxContext, LongctxError]] = {}
        for s in j.get("stacks", []):
            if "refusal" in s:
                stacks[s["stack"]] = BadInput(s["refusal"]["field"], s["refusal"]["message"])
            else:
                stacks[s["stack"]] = MaxContext._from(s)
        # The plan as `max-context -o` writes its file (its prediction per phase included), with
        # the answer's keys beside it as plan() has them: which stacks export it, and what its
        # positions need past max_position_embeddings.
        plan = dict(j["plan"])
        plan["exports"] = j.get("exports", [])
        if j.get("positions"):
            plan["positions"] = j["positions"]
        return MaxContext(int(j["max_tokens"]), int(j["granularity_tokens"]), j["binding"], j.get("rule", ""),
                          Plan(plan), list(j.get("ladder", [])), dict(j), j.get("layout", ""), stacks,
                          j.get("positions", ""))


def max_context(model: ModelSpec = "llama-3.1-8b", gpus: int = 8, gpu: str = "h100-80gb", techniques: Union[str, Iterable[str]] = "all",
                *, budget: Union[int, str, None] = None, host_mem: Union[int, str, None] = None,
                gpus_per_node: Optional[int] = None, ladder: bool = True, expandable_segments: bool = False,
                **settings: Any) -> MaxContext:
    """The longest context `model` trains on `gpus` GPUs with the allowed techniques
    (``longctx max-context``). The settings (:func:`setting_keywords`) are keywords as the
    CLI's flags are: ``dtype`` and ``grad_dtype`` ("bf16" or "fp32"); ``stack="hf"`` predicts
    transformers' modeling code with torch AdamW (``attention``: "sdpa", "eager" or, on GPUs,
    "flash_attention_2"; ``hf_checkpointing``: "non-reentrant" or "reentrant";
    ``hf_attention_mask``: whether batches carry an attention_mask, as the Trainer's do;
    ``hf_use_cache``: False runs the model with use_cache=False, as training scripts often set
    it; True (the default) leaves the config's use_cache, which a config saying false keeps off;
    ``hf_optimizer``: "adamw_torch_fused", the Trainer's default, or "adamw_torch"; ``hf_loss``:
    "transformers", the model's own loss over the full logits, or "trl-chunked-nll", TRL
    SFTTrainer's chunked loss). ``stack="arctic"`` predicts ArcticTraining (transformers under
    DeepSpeed ZeRO-3; ``attention``: "flash_attention_2" or "flash_attention_3";
    ``arctic_model``: "liger", Liger's kernels, or "huggingface"). ``stack="torchtitan"``
    predicts torchtitan's Llama 3 training (FSDP2 across GPUs; one GPU in fp32).
    ``max_positions``: "extend" (positions past the model's max_position_embeddings are planned,
    as RoPE scaling extends them; :attr:`MaxContext.positions` says so) or "model" (the answer
    stays within the limit, which then binds as itself). ``stack="all"``
    answers for longctx's own runtime and fills :attr:`MaxContext.stacks` with every stack's
    answer (``longctx max-context --stack all``). Raises BadInput, or NoFit when nothing fits at all."""
    args = _cluster(model, gpus, gpu, budget, host_mem, techniques, gpus_per_node, expandable_segments, settings)
    if settings:
        raise BadInput(_keyword(next(iter(settings))), f"is not a setting; the settings are {', '.join(setting_keywords())}")
    return MaxContext._from(json.loads(_answer(_core.max_context(args, _flag("ladder", ladder)))))


def plan(model: ModelSpec = "llama-3.1-8b", gpus: int = 8, seq: Union[int, str] = "128K", gpu: str = "h100-80gb",
         techniques: Union[str, Iterable[str]] = "all", *, budget: Union[int, str, None] = None,
         host_mem: Union[int, str, None] = None, gpus_per_node: Optional[int] = None, no_search: bool = False,
         expandable_segments: bool = False, **options: Any) -> Plan:
    """The fastest plan that fits `seq` tokens (``longctx plan``). Keyword knobs are fixed
    (``sharding="zero3"``, ``ulysses=8``, ``offload_optimizer=True``; see :func:`knobs`),
    the others searched; with ``no_search=True`` the others are at none/1/0/off. The settings
    (``stack``, ``attention``, ``dtype``, ...: :func:`setting_keywords`) as for :func:`max_context`.
    Raises BadInput, or NoFit when the search finds no plan that fits; with ``no_search=True``
    the plan is returned as evaluated, fitting or not (``.prediction.feasible`` says; the CLI
    prints it too, and exits 3 where it does not fit)."""
    args = _cluster(model, gpus, gpu, budget, host_mem, techniques, gpus_per_node, expandable_segments, options)
    if isinstance(seq, str):
        _value("seq", seq)
    else:
        seq = _whole("seq", seq, "is not a length; give tokens as an int or text such as '128K'")
    return Plan(json.loads(_answer(_core.plan(args, str(seq), _fixed_knobs(options), _flag("no_search", no_search)))))


def _fixed_knobs(options: Dict[str, Any]) -> Dict[str, str]:
    """The knob keywords as the CLI's flag text, each of its kind's type (knobs()): a switch a
    bool, an int knob an int (not '2', not 2.0), a text knob a str."""
    kinds = dict(_core.knob_keys())
    fixed = {}
    for name, value in options.items():
        kind = kinds.get(name)
        if kind is None:
            # Not a knob (a misspelling: ulyses=2, ladder=True): the name is the planner's to
            # refuse (core.cpp knobs_from: "is neither a knob nor a setting; the knobs are ..."),
            # before its value's type says anything.
            fixed[_keyword(name)] = ""
        elif kind == "switch":
            fixed[name] = "true" if _flag(name, value) else "false"
        elif kind == "int":
            value = _whole(name, value, "is not an int")
            if not 0 <= value < 1 << 62:
                raise BadInput(name, f"{value} is outside 0..2**62; see the knob's bounds in `longctx plan --help`")
            fixed[name] = str(value)
        else:
            fixed[name] = _value(name, value)
    return fixed


def compare(plan: Plan, trace: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """A plan's predicted peaks beside a measured trace's (``longctx run --trace`` or a
    PyTorch profiler trace exported with ``profile_memory=True``)."""
    if not isinstance(plan, Plan):
        raise BadInput("plan", f"{plan!r} is not a Plan; give one from plan() or Plan.from_json()")
    return json.loads(_answer(_core.compare(plan.to_json(None), _path("trace", trace))))


def models() -> List[str]:
    """The model presets (``longctx models``)."""
    return list(_core.models())


def model_config(model: ModelSpec) -> Dict[str, Any]:
    """The model as the planner reads it (its shapes), from any ModelSpec."""
    args = _core.ClusterRequest()
    _model_args(model, args)
    return json.loads(_answer(_core.model(args)))


def knobs() -> Dict[str, str]:
    """The knobs :func:`plan` takes as keywords, with their kind (switch, int, text)."""
    return dict(_core.knob_keys())
