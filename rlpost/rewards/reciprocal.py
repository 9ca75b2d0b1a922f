"""reciprocal: reciprocal reward mapping of a continuous, unbounded error gap (seed 000 #4, REATS).

"A reciprocal reward mapping transforms the continuous unbounded MSE gap into bounded signals with
amplified near-oracle sensitivity, addressing the uniform sensitivity and outlier-dominated
advantage compression inherent in naive reward designs for regression-based GRPO" (seed 000 #4)::

    err_i = mean_k (x_ik - y_k)^2   (error: squared)   or   mean_k |x_ik - y_k|   (error: abs)
    gap_i = max(0, err_i - e*)      e*: the oracle's error (oracle_column; 0 without one)
    r_i   = 1 / (1 + gap_i / scale)                      in (0, 1], 1 at the oracle

Near the oracle dr/dgap = -1/scale (steepest), far away r ~ scale/gap (flat), so one outlier cannot
compress everyone else's advantage the way a linear -gap reward does.

Choices where the abstract is silent:
- The prediction is read from the completion after ``</think>`` (``strip_think``): for a scalar
  target its last number; for a list target of length K the last K numbers (REATS predicts a
  weight vector; a shorter answer is unparsable).
- ``oracle_column`` (optional) holds the best achievable error per row (REATS: the oracle
  ensemble's MSE), so the gap is measured from what is reachable; without it the oracle error is 0.
- A completion with no usable prediction gets ``unparsable`` (default 0.0, the bound that
  r approaches as the gap grows); a row whose target has no number is unscorable (``None``).
Not a group reward: each completion is scored alone.

This term compares the numbers a completion writes with a target column. REATS's own reward, the *forecast* MSE
gap of the ensemble the completion's weights form (the candidates' forecasts and the true future read from the
row), is ``reward=ensemble_weights`` (rlpost/rewards/ensemble_weights.py), which maps that gap with
``reciprocal_map``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.math_answer import NUMBER, gold_number


def target_vector(gold: Any) -> list[float] | None:
    """A target as a list of numbers: a number, a numeric string, or a list of them (None: unusable)."""
    if isinstance(gold, (list, tuple)):
        values = [gold_number(v) for v in gold]
        numbers = [v for v in values if v is not None]
        return numbers if values and len(numbers) == len(values) else None
    value = gold_number(gold)
    return None if value is None else [value]


def reciprocal_map(gap: float, scale: float) -> float:
    """``1 / (1 + gap / scale)``: 1 at ``gap = 0``, 1/2 at ``gap = scale``, -> 0 as the gap grows."""
    return 1.0 / (1.0 + gap / scale)


def last_numbers(text: str, k: int) -> list[float] | None:
    found = [float(n.replace(",", "")) for n in NUMBER.findall(text)]
    return found[-k:] if len(found) >= k else None


@REWARDS.register("reciprocal")
class Reciprocal(Reward):
    """1 / (1 + gap / scale): a bounded reward of the error gap to the oracle, steep near it."""

    @dataclass(frozen=True)
    class Config:
        column: str = "answer"  # dataset column holding the target (a number or a list of numbers)
        error: Literal["squared", "abs"] = "squared"  # mean squared or mean absolute error
        scale: Annotated[float, Range(gt=0)] = 1.0  # the gap at which the reward is 1/2
        oracle_column: str | None = None  # column with the best achievable error per row (null: 0)
        unparsable: Annotated[float, Range()] = 0.0  # reward of a completion with no usable prediction
        strip_think: bool = True  # read the prediction after </think> only

    def __init__(self, cfg: Config):
        if cfg.scale <= 0:
            raise ParamError("scale", f"must be > 0, got {cfg.scale}")
        super().__init__(cfg)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and targets ``[N]`` -> rewards ``[N]`` in (0, 1] (or ``unparsable`` / None)."""
        n, cfg = len(completions), self.cfg
        golds = column(kwargs, cfg.column, n, "reciprocal")
        oracles = column(kwargs, cfg.oracle_column, n, "reciprocal") if cfg.oracle_column else [0.0] * n
        out: list[float | None] = []
        for completion, gold, oracle in zip(completions, golds, oracles):
            y = target_vector(gold)
            if y is None:
                out.append(None)
                continue
            x = last_numbers(answer_text(completion, cfg.strip_think), len(y))
            if x is None:
                out.append(cfg.unparsable)
                continue
            diffs = [(a - b) ** 2 if cfg.error == "squared" else abs(a - b) for a, b in zip(x, y)]
            gap = max(0.0, sum(diffs) / len(diffs) - float(oracle or 0.0))
            out.append(reciprocal_map(gap, cfg.scale))
        return out


__all__ = ["Reciprocal", "last_numbers", "reciprocal_map", "target_vector"]
