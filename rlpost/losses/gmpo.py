"""``gmpo``: Geometric-Mean Policy Optimization (GMPO, arXiv 2507.20673; TRL 1.16 ``trl.experimental.gmpo``).

GRPO maximizes the arithmetic mean of the token objectives ``r_t * A``; GMPO maximizes their
geometric mean, a sequence-level weight far less sensitive to outlier token ratios, which allows a
much wider clip range. The clip is PPO's pessimistic min, per token, in log space::

    d_t     = logps - old_logps                                          [B, T]
    c_t     = clamp(d_t, -epsilon_low, epsilon_high)
    d'_t    = min(d_t, c_t) where A > 0, max(d_t, c_t) where A <= 0      (the pessimistic side)
    log s_i = sum_t d'_t * m / max(sum_t m, 1)                           [B, 1]
    loss_i  = -exp(log s_i) * A_i                                        [B, 1] ([B, T] if A is)

On-policy (d = 0) the gradient is the policy gradient ``-A / |o| * grad log pi`` per token, as GRPO's
under ``seq-mean-token-mean``; a token past its clip bound in the favourable direction drops out of
the gradient, the others keep the shared sequence weight ``s_i``.

Choices, all TRL's ``GMPOTrainer`` (which overrides ``_compute_loss``):
- ``epsilon_low`` / ``epsilon_high`` are bounds on the *log*-ratio (ratio range
  ``(exp(-epsilon_low), exp(epsilon_high))``); default 0.4 both, the paper's (``GMPOConfig``).
- Aggregation: a plain mean of ``loss_i`` over sequences, which is ``seq-mean-token-mean`` on the
  broadcast ``[B, 1]`` loss (the ``gmpo`` bundle's; GMPO's 1/|o| normalization is inside ``s_i``).
  KL in the loss is then a token mean per sequence, as TRL's GMPO adds it.
- A sequence without counted tokens contributes 0 here; TRL's GMPO still adds ``-A_i`` (with
  ``s_i = 1`` and no gradient) to its loss value. The two agree whenever every sequence has a
  counted token (no ``overlong.filter`` / dynamic-sampling masking of whole rows).
- ``[B, T]`` advantages: the sign test and ``loss`` are per token (TRL's GMPO takes only ``[B]``).
Metrics, TRL's: ``clip_ratio/low_mean`` (d < -epsilon_low and A < 0), ``clip_ratio/high_mean``
(d > epsilon_high and A > 0), ``clip_ratio/region_mean``, token means; ``low_min`` / ``high_max``
over per-sequence means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import _per_seq_extreme, as_2d


def clipped_log_ratio(log_ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """[B, T] log-ratios, [B, 1] or [B, T] advantages -> [B, T] log-ratios clipped on the pessimistic side."""
    clamped = log_ratio.clamp(-low, high)
    return torch.where(advantages > 0, torch.minimum(log_ratio, clamped), torch.maximum(log_ratio, clamped))


@LOSSES.register("gmpo")
class GMPO(PolicyLoss):
    """GMPO: -A times the geometric mean of the (log-space clipped) token ratios of each sequence."""

    @dataclass(frozen=True)
    class Config:
        # lower clip of the token log-ratio: log(pi/pi_old) >= -epsilon_low (ratio >= exp(-epsilon_low))
        epsilon_low: Annotated[float, Range(ge=0)] = 0.4
        # upper clip of the token log-ratio: log(pi/pi_old) <= epsilon_high (ratio <= exp(epsilon_high))
        epsilon_high: Annotated[float, Range(ge=0)] = 0.4

        def __post_init__(self) -> None:
            if self.epsilon_low < 0 or self.epsilon_high < 0:
                raise ValueError(
                    f"epsilon_low and epsilon_high must be >= 0, got {self.epsilon_low}, {self.epsilon_high}"
                )

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps, mask [B, T], advantages [B, 1] -> loss [B, 1] (broadcast over tokens), metrics."""
        cfg, advantages = self.cfg, as_2d(x.advantages)
        log_ratio = x.logps - x.old_logps  # [B, T]
        clipped = clipped_log_ratio(log_ratio, advantages, cfg.epsilon_low, cfg.epsilon_high)
        mask = x.mask.to(clipped.dtype)
        log_s = ((clipped * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)  # [B, 1]
        loss = -torch.exp(log_s) * advantages
        with torch.no_grad():
            is_low = (log_ratio < -cfg.epsilon_low) & (advantages < 0)
            is_high = (log_ratio > cfg.epsilon_high) & (advantages > 0)
            metrics = {
                "clip_ratio/low_mean": masked_metric_mean(is_low, x.mask),
                "clip_ratio/high_mean": masked_metric_mean(is_high, x.mask),
                "clip_ratio/region_mean": masked_metric_mean(is_low | is_high, x.mask),
                "clip_ratio/low_min": _per_seq_extreme(is_low, x.mask, largest=False),
                "clip_ratio/high_max": _per_seq_extreme(is_high, x.mask, largest=True),
            }
        return loss, metrics

    def describe(self) -> str:
        cfg = self.cfg
        return (
            "-exp(mean_t clip(log r_t))*A per sequence: the geometric mean of the token ratios r = pi/pi_old, log r "
            f"clipped on the pessimistic side of [-{cfg.epsilon_low:g}, {cfg.epsilon_high:g}] (min if A>0, max else)"
        )
