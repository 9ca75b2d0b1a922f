"""``cispo``: Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv 2506.13585; ScaleRL 2510.13786).

Instead of clipping the surrogate (which zeroes the gradient of clipped tokens), CISPO clips the
importance weight, stops its gradient, and uses it as a per-token weight of a REINFORCE term::

    r    = exp(logps - old_logps)                        [B, T]
    loss = -sg(min(r, epsilon_high)) * A * logps          [B, T]

so every token keeps a gradient ``-min(r, eps_high) * A`` on its log-prob. This is TRL 1.16
``loss_type="cispo"`` (whose aggregation is the ``token-mean`` one).

Choices:
- ``epsilon_high`` is an absolute upper bound on the ratio (ScaleRL's eps_max), not ``1 + eps``.
  TRL 1.16 has no cispo-specific default: ``epsilon_high=None`` falls back to ``epsilon`` (0.2),
  which would clamp every ratio to at most 0.2 (a 5x down-weighting of on-policy tokens). TRL's
  documentation recommends 5.0 for cispo, and that is the default here. Pass 0.2 to reproduce TRL
  run with default arguments.
- No lower bound, as in TRL and the ScaleRL form (MiniMax-M1 leaves eps_low unbounded too).
- Token-level ratio only (TRL also allows a sequence-level ratio with cispo but warns against it).
- The loss value itself is not a meaningful objective (it contains ``logps``); only its gradient is.
Metric ``cispo_clip_ratio``: masked token mean of (r > epsilon_high and A > 0), as TRL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d


@LOSSES.register("cispo")
class CISPO(PolicyLoss):
    """CISPO: REINFORCE weighted by the clipped, stop-gradient importance ratio."""

    @dataclass(frozen=True)
    class Config:
        # upper bound of the IS weight (ScaleRL eps_max; TRL's fallback would be 0.2)
        epsilon_high: Annotated[float, Range(gt=0)] = 5.0

        def __post_init__(self) -> None:
            if self.epsilon_high <= 0:
                raise ValueError(f"epsilon_high must be > 0, got {self.epsilon_high}")

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps [B, T], advantages [B, 1] or [B, T] -> per-token loss [B, T], metrics."""
        advantages = as_2d(x.advantages)
        coef_1 = torch.exp(x.logps - x.old_logps)  # [B, T]
        weight = torch.clamp(coef_1, max=self.cfg.epsilon_high).detach()
        loss = -weight * advantages * x.logps
        with torch.no_grad():
            is_clipped = (coef_1 > self.cfg.epsilon_high) & (advantages > 0)
            metrics = {"cispo_clip_ratio": masked_metric_mean(is_clipped, x.mask)}
        return loss, metrics

    def describe(self) -> str:
        return f"-sg(min(r, {self.cfg.epsilon_high:g}))*A*log pi, r = pi/pi_old per token"
