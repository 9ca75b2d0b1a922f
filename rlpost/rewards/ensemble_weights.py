"""ensemble_weights: REATS's reward (seed 000 #4), the forecast-MSE gap of the ensemble a completion's weights
form, mapped reciprocally.

"A reciprocal reward mapping transforms the continuous unbounded MSE gap into bounded signals with amplified
near-oracle sensitivity, addressing the uniform sensitivity and outlier-dominated advantage compression inherent in
naive reward designs for regression-based GRPO" (seed 000 #4). Per completion, with the row's candidate forecasts
``F [K][H]`` and true future ``y [H]`` (rlpost/data/ensembles.py)::

    w      = the completion's percentage table, normalised to sum 1           [K]
    gap    = mse(w^T F, y) - min_{v in simplex} mse(v^T F, y)   >= 0           (the oracle ensemble's MSE)
    r      = 1 / (1 + gap / scale)                                 mapping: reciprocal   in (0, 1]
    r      = max(floor, 1 - gap / scale)                           mapping: linear (the naive baseline)

The reciprocal reward's slope is ``-1/scale`` at the oracle and ``~ -scale / gap^2`` far from it: a group's spread
comes from its near-oracle completions, and one far-off completion cannot take the whole group's standard deviation
(the linear reward's slope is ``-1/scale`` everywhere, and unfloored, one outlier's ``-gap/scale`` dominates it).

Choices where the abstract is silent:
- The table is read after ``</think>`` (``strip_think``): rows ``A: 40%`` (``rlpost/data/ensembles.py``
  ``parse_table``), the last row of a label counting, a label without a row weighing 0, normalised by their sum;
  no positive percentage at all is unparsable and gets ``unparsable`` (default 0.0, the reciprocal's lower bound).
- The oracle is the exact best simplex combination of the row's candidates (computed here, so any data with the
  two columns works), not the best table on a grid; its gap is 0 and no table beats it.
- ``gap`` is in the series' squared units; ``scale`` is the gap worth half the reward. ``floor`` bounds the linear
  mapping below (null: unbounded, the reward ``1 - gap/scale`` of the abstract's naive design).
- A row whose forecasts or future are missing, or whose shapes disagree, is unscorable (``None``).
Not a group reward: each completion is scored alone. ``reward=ens_gap`` logs the gap itself (``eval/ens_gap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from rlpost.core.chat import answer_text
from rlpost.core.schema import Range
from rlpost.data.ensembles import ensemble_mse, oracle_weights, parse_table, read_matrix
from rlpost.rewards.base import REWARDS, ParamError, Reward, column
from rlpost.rewards.reciprocal import reciprocal_map


def row_candidates(forecasts: Any, future: Any) -> tuple[list[list[float]], list[float]] | None:
    """A row's ``forecasts [K][H]`` and ``future [H]`` (lists or their JSON text); None when unusable."""
    f, y = read_matrix(forecasts), read_matrix(future)
    if f is None or y is None or f.ndim != 2 or y.ndim != 1 or f.shape[1] != y.shape[0] or f.shape[0] < 1:
        return None
    return f.tolist(), y.tolist()


def ensemble_gap(weights: list[float], forecasts: list[list[float]], future: list[float]) -> float:
    """``mse(weights-ensemble) - mse(oracle ensemble)``, clipped at 0 against rounding."""
    return max(0.0, ensemble_mse(weights, forecasts, future) - oracle_weights(forecasts, future)[1])


def completion_gaps(
    completions: list, kwargs: dict[str, Any], forecasts_column: str, target_column: str, strip: bool, reward: str
) -> list[tuple[float | None, list[list[float]], list[float]] | None]:
    """Per completion ``(gap or None when its table is unparsable, forecasts, future)``; None: an unscorable row."""
    n = len(completions)
    rows = zip(completions, column(kwargs, forecasts_column, n, reward), column(kwargs, target_column, n, reward))
    out: list[tuple[float | None, list[list[float]], list[float]] | None] = []
    for completion, forecasts, future in rows:
        row = row_candidates(forecasts, future)
        if row is None:
            out.append(None)
            continue
        weights = parse_table(answer_text(completion, strip), len(row[0]))
        out.append((None if weights is None else ensemble_gap(weights, *row), *row))
    return out


@REWARDS.register("ensemble_weights")
class EnsembleWeights(Reward):
    """The reciprocal (or linear) mapping of the ensemble-MSE gap of the completion's weights to the oracle's."""

    @dataclass(frozen=True)
    class Config:
        forecasts_column: str = "forecasts"  # column with the candidates' forecasts [K][H] (a list or its JSON)
        target_column: str = "future"  # column with the true future [H]
        mapping: Literal["reciprocal", "linear"] = "reciprocal"  # 1/(1 + gap/scale) | max(floor, 1 - gap/scale)
        scale: Annotated[float, Range(gt=0)] = 2.0  # the gap (squared series units) worth half the reward
        floor: Annotated[float | None, Range()] = 0.0  # mapping linear only: its lower bound (null: unbounded)
        unparsable: Annotated[float, Range()] = 0.0  # reward of a completion with no usable table
        strip_think: bool = True  # read the table after </think> only

    def __init__(self, cfg: Config):
        if cfg.scale <= 0:
            raise ParamError("scale", f"must be > 0, got {cfg.scale}")
        super().__init__(cfg)

    def mapped(self, gap: float) -> float:
        """The reward of an ensemble-MSE gap ``>= 0``."""
        if self.cfg.mapping == "reciprocal":
            return reciprocal_map(gap, self.cfg.scale)
        linear = 1.0 - gap / self.cfg.scale
        return linear if self.cfg.floor is None else max(self.cfg.floor, linear)

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and their rows' forecasts and future -> rewards ``[N]``."""
        cfg = self.cfg
        scored = completion_gaps(completions, kwargs, cfg.forecasts_column, cfg.target_column, cfg.strip_think,
                                 "ensemble_weights")  # fmt: skip
        return [None if s is None else cfg.unparsable if s[0] is None else self.mapped(s[0]) for s in scored]


__all__ = ["EnsembleWeights", "completion_gaps", "ensemble_gap", "row_candidates"]
