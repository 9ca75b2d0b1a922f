"""focal: Focal Reward (seed 004 #4), saturation-aware re-weighting of rubric criteria.

"We first leverage an inverse reward projection mechanism to estimate the saturation degree of each
criterion in the rubric [...] the final objective is designed with an automatically reweighting
coefficient for each criterion" toward "rubrics that still have room for improvement" (seed
004 #4). The criteria are the reward terms (columns of ``R [N, R]``; list one rubric term per
criterion, or any rewards). Per step::

    u_j   = (mean_n R[n, j] - low_j) / (high_j - low_j)     clipped to [0, 1]  (inverse projection)
    s_j   <- m s_j + (1 - m) u_j                            (saturation; s_j = u_j at the first step)
    a_j   = w_j (1 - s_j + eps)^gamma  *  sum_k w_k / sum_k w_k (1 - s_k + eps)^gamma
    r_n   = sum_j a_j R[n, j]                               (NaN terms skipped, all-NaN rows NaN)

Choices where the abstract is silent:
- "Inverse reward projection" is read as mapping a criterion's batch-mean reward back onto its
  own score range [low, high] (config ``low``/``high``: one value for all terms or one per term),
  so saturation 1 means the criterion is at its ceiling. Its mean is over the rows that scored it.
- Saturation is smoothed across steps by an exponential moving average (``momentum``; 0 = the
  current batch only) and travels with checkpoints (``state_dict``).
- The re-weighting is focal-loss shaped, (1 - s)^gamma (gamma = 0 is the weighted sum), and the
  coefficients are renormalized to the configured total weight so the reward scale is kept;
  ``eps`` keeps a saturated criterion from vanishing entirely.
Logged: ``focal/saturation/<term>`` and ``focal/weight/<term>`` per column, by the term's name in a run
(by column index when called outside one).

The criteria of one rubric are separate columns with ``reward=rubric`` and
``reward.terms.0.params.columns=criteria`` (rlpost/rewards/rubric.py, rlpost/scoring/columns.py): then
focal re-weights the rubric's criteria, as the seed does; with the rubric's default single column it
has one term and is the plain weighted sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import torch

from rlpost.advantages.base import nan_weighted_sum
from rlpost.combine.base import COMBINERS, Combine
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@COMBINERS.register("focal")
class Focal(Combine):
    """Weighted sum whose weights move toward the criteria furthest from saturation."""

    stateful = True  # its running state travels with every checkpoint (rlpost/runs/state.py)
    multi_column = True  # one reward column: the weighted sum up to a factor (rlpost show warns)

    @dataclass(frozen=True)
    class Config:
        gamma: Annotated[float, Range(ge=0)] = 2.0  # focusing exponent on (1 - saturation); 0 = plain weighted sum
        momentum: Annotated[float, Range(ge=0, lt=1)] = 0.9  # EMA of the saturation across steps (0 = this batch only)
        low: list[Annotated[float, Range()]] = field(
            default_factory=lambda: [0.0]
        )  # each term's lowest score (one value = all)
        high: list[Annotated[float, Range()]] = field(
            default_factory=lambda: [1.0]
        )  # each term's highest score (one value = all)
        # floor added to 1 - saturation, so a saturated term keeps some weight
        eps: Annotated[float, Range(ge=0)] = 0.05

        def __post_init__(self):
            if self.gamma < 0 or not 0.0 <= self.momentum < 1.0 or self.eps < 0:
                raise ValueError("gamma >= 0, 0 <= momentum < 1 and eps >= 0 are required")
            if len(self.low) != len(self.high) and 1 not in (len(self.low), len(self.high)):
                raise ValueError("low and high need one value each, or one value per reward term")

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.saturation: torch.Tensor | None = None  # [R]
        self.names: list[str] | None = None  # the run's reward column names, for the metrics

    def check_run(self, run: Any) -> None:
        self.names = list(run.reward.names)
        try:
            self.bounds(len(self.names))
        except ValueError as err:
            raise ConfigError(f"{err} ({', '.join(self.names)})") from None

    def bounds(self, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = list(self.cfg.low), list(self.cfg.high)
        for name, values in (("low", low), ("high", high)):
            if len(values) not in (1, r):
                raise ValueError(f"reward.combine.{name} has {len(values)} values for {r} reward terms")
        low_t = torch.tensor(low * r if len(low) == 1 else low, dtype=torch.float32)
        high_t = torch.tensor(high * r if len(high) == 1 else high, dtype=torch.float32)
        if (high_t <= low_t).any():
            raise ValueError("reward.combine.high must be above low for every term")
        return low_t, high_t

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``reward_terms [N, R]``, ``weights [R]`` -> rewards ``[N]``; ``num_generations`` unused."""
        terms = reward_terms.float()
        r = terms.size(1)
        low, high = (t.to(terms.device) for t in self.bounds(r))
        batch_mean = torch.nanmean(terms, dim=0)  # [R]; NaN for a term that scored no row
        level = ((batch_mean - low) / (high - low)).clamp(0.0, 1.0)
        if self.saturation is None or self.saturation.numel() != r:
            state = level.nan_to_num(0.0)
        else:
            old = self.saturation.to(terms.device)
            state = torch.where(torch.isnan(level), old, self.cfg.momentum * old + (1 - self.cfg.momentum) * level)
        self.saturation = state.detach().cpu()
        w = weights.to(terms.device, terms.dtype)
        focus = (1.0 - state + self.cfg.eps).pow(self.cfg.gamma)  # [R]
        alpha = w * focus
        alpha = alpha * (w.sum() / alpha.sum()) if alpha.sum() > 0 else w
        keys = self.names if self.names is not None and len(self.names) == r else [str(j) for j in range(r)]
        metrics = {f"focal/saturation/{keys[j]}": float(state[j]) for j in range(r)}
        metrics.update({f"focal/weight/{keys[j]}": float(alpha[j]) for j in range(r)})
        return nan_weighted_sum(terms, alpha), metrics

    def state_dict(self) -> dict:
        return {"saturation": None if self.saturation is None else self.saturation.tolist()}

    def load_state_dict(self, state: dict) -> None:
        values = state.get("saturation")
        self.saturation = None if values is None else torch.tensor(values, dtype=torch.float32)
