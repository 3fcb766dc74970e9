"""longctx: memory plans for long-context training of Llama-family models.

Which memory techniques let a model train at sequence length S on N GPUs, how fast, and
what is the longest context it can reach. The planner is the same C++ library the
``longctx`` command runs (no LibTorch), so every answer here equals the CLI's::

    import longctx
    print(longctx.max_context(model="llama-3.1-8b", gpus=8).max_tokens)
    plan = longctx.plan("llama-3.1-8b", gpus=8, seq="1M"); print(plan.explain())

Errors raise :class:`BadInput` (exit 2 in the CLI), :class:`NoFit` (exit 3) or
:class:`LongctxError`; each carries the ``field`` and the message the CLI prints.
"""
from __future__ import annotations

from ._api import (
    BadInput,
    LongctxError,
    MaxContext,
    ModelSpec,
    NoFit,
    Plan,
    Prediction,
    compare,
    knobs,
    max_context,
    model_config,
    models,
    plan,
    setting_keywords,
)
from ._core import version as _version

__version__ = _version()

__all__ = [
    "BadInput",
    "LongctxError",
    "MaxContext",
    "ModelSpec",
    "NoFit",
    "Plan",
    "Prediction",
    "compare",
    "knobs",
    "max_context",
    "model_config",
    "models",
    "plan",
    "setting_keywords",
]
