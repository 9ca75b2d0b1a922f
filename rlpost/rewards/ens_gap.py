"""ens_gap: REATS's readout (seed 000 #4), the ensemble-MSE gap itself, logged and never trained on.

Per completion, the gap ``mse(w^T F, y) - mse(oracle ensemble)`` of ``reward=ensemble_weights``
(rlpost/rewards/ensemble_weights.py), in the series' squared units, lower is better, 0 at the oracle. As a
weight-0 term next to the training term, its mean is logged per step (``rewards/ens_gap/mean``) and held out
(``eval/ens_gap``: the mean gap of the held-out rows), the quantity REATS's reciprocal mapping should lower faster
than the naive linear one.

Choices: a completion without a usable table is scored as the equal-weight ensemble (``unparsable: equal``, the
router's natural default), so every held-out row counts and writing no table cannot lower the readout;
``unparsable: skip`` leaves it out (``None``). A positive weight would train the policy to *widen* the gap and is
refused before any model loads; a negative weight trains on ``-gap`` (the unbounded naive reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.rewards.base import REWARDS, Reward
from rlpost.rewards.ensemble_weights import completion_gaps, ensemble_gap


@REWARDS.register("ens_gap")
class EnsGap(Reward):
    """The ensemble-MSE gap of the completion's weights to the oracle ensemble (a readout: lower is better)."""

    @dataclass(frozen=True)
    class Config:
        forecasts_column: str = "forecasts"  # column with the candidates' forecasts [K][H] (a list or its JSON)
        target_column: str = "future"  # column with the true future [H]
        unparsable: Literal["equal", "skip"] = "equal"  # no usable table: the equal-weight ensemble's gap, or None
        strip_think: bool = True  # read the table after </think> only

    def check_run(self, run: Any) -> None:
        for func, name, weight in zip(run.reward.funcs, run.reward.names, run.reward.weights.tolist()):
            if func is self and weight > 0:
                raise ConfigError(
                    f"reward term {name!r} (ens_gap) is the ensemble-MSE gap, lower is better: weight {weight} would "
                    "train the policy to widen it. Give it weight 0 (a readout) next to reward term ensemble_weights."
                )

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` and their rows' forecasts and future -> gaps ``[N]`` (>= 0)."""
        cfg = self.cfg
        out: list[float | None] = []
        for s in completion_gaps(completions, kwargs, cfg.forecasts_column, cfg.target_column, cfg.strip_think,
                                 "ens_gap"):  # fmt: skip
            if s is None:
                out.append(None)
                continue
            gap, forecasts, future = s
            if gap is None and cfg.unparsable == "equal":
                gap = ensemble_gap([1 / len(forecasts)] * len(forecasts), forecasts, future)
            out.append(gap)
        return out
