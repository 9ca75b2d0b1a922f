"""Scalar valuations for ``rlpost train-rm objective=regression`` (KARMA, seed 004 #3).

KARMA "trains a reward model on Reddit conversations to predict response valuation conditioned on
context", and finds that "a reward model relying exclusively on conversational context was a worse
predictor of Reddit karma but yielded substantially better downstream performance" (seed 004 #3).

A jsonl row is ``{"prompt": str | messages, "response": str | messages, "value": number,
"features": {name: str | number}}`` (``features`` optional). Choices where the abstract is silent:

- "Relying exclusively on conversational context" is read as: the reward model's input is the
  conversation alone (the thread so far, ``prompt``, and the reply, ``response``). Without
  ``context_only`` the row's non-conversational signals (``features``: for Reddit, the subreddit,
  how long after the post the reply came, its depth in the thread) are shown to the model too, as a
  system message ``Thread metadata: name=value; ...`` ahead of the conversation (a header line in
  plain rendering). A policy being trained has no such signals for its own replies: the reward term
  reads them from the data columns of the same names, and fails a row that lacks them.
- The target is ``t = sign(v) log(1 + |v|)`` (``target_transform: signed_log``, since karma is
  heavy-tailed; ``none`` keeps ``v``), standardized with the training rows' mean and std, and the
  loss is the squared error of the 1-label classifier's scalar (transformers' regression loss).
- Held-out metrics, on the transformed target: mean squared error of the standardized prediction,
  Pearson's r and Spearman's rho (average ranks for ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.core.jsonl import json_objects
from rlpost.core.ranks import average_ranks
from rlpost.reward_model.pairs import valid_part

FIELDS = ("prompt", "response", "value")


@dataclass(frozen=True)
class Valuation:
    prompt: Any  # str or chat messages: the conversation before the reply
    response: Any  # str or assistant messages
    value: float  # the observed valuation (e.g. karma)
    features: dict[str, Any] = field(default_factory=dict)  # non-conversational signals of the row


def read_valuations(path: str) -> list[Valuation]:
    """Rows of a valuation jsonl; a bad line raises ``ConfigError("<path> line <n>: ...")``."""
    rows: list[Valuation] = []
    for where, row in json_objects(path, "valuation", FIELDS):
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise ConfigError(
                f"{where}: missing field {missing[0]!r}; objective=regression reads rows with "
                f"{', '.join(FIELDS)} (and optional features); preference pairs are for objective=bradley_terry."
            )
        for name in ("prompt", "response"):
            if not valid_part(row[name]):
                raise ConfigError(f"{where}: field {name!r} must be a non-empty string or a list of messages.")
        value = row["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{where}: value must be a finite number, got {value!r}.")
        features = row.get("features") or {}
        if not isinstance(features, dict):
            raise ConfigError(f"{where}: features must be an object of name: value, got {features!r}.")
        rows.append(Valuation(row["prompt"], row["response"], float(value), dict(features)))
    if not rows:
        raise ConfigError(f"{path}: no rows (the file is empty).")
    return rows


def feature_names(rows: list[Valuation], path: str) -> list[str]:
    """The feature names every row shares (sorted); rows that disagree are a ConfigError."""
    names = sorted(rows[0].features)
    for i, row in enumerate(rows):
        if sorted(row.features) != names:
            raise ConfigError(
                f"{path}: row {i + 1} has features {sorted(row.features)}, the first row {names}; "
                "every row needs the same features (or use context_only=true, which ignores them)."
            )
    return names


def transform_target(values: torch.Tensor, transform: str) -> torch.Tensor:
    """``signed_log``: ``sign(v) log(1 + |v|)``; ``none``: ``v``. ``[N]`` -> ``[N]``."""
    if transform == "signed_log":
        return torch.sign(values) * torch.log1p(values.abs())
    return values


def with_features(prompt: Any, features: dict[str, Any], conversational: bool) -> Any:
    """The prompt the reward model reads when it sees the row's features: a system message (or, in plain
    rendering, a header line) ``Thread metadata: a=1; b=x`` ahead of the conversation."""
    if not features:
        return prompt
    header = "Thread metadata: " + "; ".join(f"{k}={features[k]}" for k in sorted(features))
    if conversational:
        messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
        return [{"role": "system", "content": header}, *messages]
    return f"{header}\n{prompt}" if isinstance(prompt, str) else [{"role": "system", "content": header}, *prompt]


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson's r of ``a [N]`` and ``b [N]`` (0 when either is constant)."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denominator = (a.pow(2).sum() * b.pow(2).sum()).sqrt()
    return float((a * b).sum() / denominator) if denominator > 0 else 0.0


def regression_metrics(predicted: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """``predicted [N]`` and standardized ``target [N]`` -> mse, pearson, spearman, and the predictions'
    mean/std (what ``normalize: heldout`` of the reward term divides by)."""
    return {
        "mse": float((predicted.double() - target.double()).pow(2).mean()),
        "pearson": pearson(predicted, target),
        "spearman": pearson(
            torch.tensor(average_ranks(predicted.tolist())), torch.tensor(average_ranks(target.tolist()))
        ),
        "score_mean": float(predicted.mean()),
        "score_std": float(predicted.std()) if len(predicted) > 1 else 0.0,
        "rows": float(len(predicted)),
    }
