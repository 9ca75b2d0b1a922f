"""``clip``: the PPO/GRPO clipped surrogate on the per-token importance ratio.

Formula (TRL 1.16 ``_compute_loss``, loss_type grpo/dr_grpo/dapo, importance_sampling_level="token")::

    r      = exp(logps - old_logps)                          [B, T]
    r_clip = clamp(r, 1 - epsilon_low, 1 + epsilon_high)
    r_cap  = min(r, ratio_cap)            if ratio_cap is set (TRL ``delta``, INTELLECT-2 two-sided clip)
    loss   = -min(r_cap * A, r_clip * A)                     [B, T]
    loss   = min(loss, -dual_clip * A)    where A < 0, if dual_clip is set (dual-clip PPO, Ye et al. 2020)

Choices:
- ``r_clip`` is computed from the uncapped ratio and the cap is applied afterwards, as in TRL; the
  clip-fraction metrics use the *capped* ratio, as TRL does (its ``coef_1`` is overwritten).
- ``ratio_cap`` and ``dual_clip`` are composable (cap first, then dual clip). For A < 0 both bound the
  loss by ``c * |A|`` with zero gradient beyond; they differ only for A > 0 when
  ``ratio_cap < 1 + epsilon_high`` (the cap then also bites positive advantages).
- ``dual_clip`` must be > 1 (Ye et al.); ``ratio_cap`` must be > 0 (TRL recommends > 1 + epsilon).
- Advantages ``[B]`` are unsqueezed to ``[B, 1]``; ``[B, T]`` per-token advantages are used as is.
- DAPO "clip-higher" (seed 000 #23) is ``epsilon_high=0.28``.
Metrics, exactly TRL's: ``clip_ratio/low_mean`` (r < 1-eps_low and A < 0), ``clip_ratio/high_mean``
(r > 1+eps_high and A > 0), ``clip_ratio/region_mean`` (either), masked token means; ``low_min`` /
``high_max`` over per-sequence means; plus ``clip_ratio/dual_mean`` (tokens where the dual cap bit).
``clip`` also logs Output Reset's ``or/*`` diagnostics (``diagnostics.py``) at its equivalent margins
``log(1 + epsilon_high)`` / ``-log(1 - epsilon_low)``, so GRPO and GRPO-OR runs compare directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.diagnostics import or_diagnostics


def as_2d(advantages: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1]; [B, 1] and [B, T] unchanged."""
    return advantages.unsqueeze(1) if advantages.dim() == 1 else advantages


def check_clip_fields(cfg: Any) -> None:
    """Validate the clip fields shared by ``clip`` and ``gspo`` configs (raises ValueError)."""
    if cfg.epsilon_low < 0 or cfg.epsilon_high < 0:
        raise ValueError(f"epsilon_low and epsilon_high must be >= 0, got {cfg.epsilon_low}, {cfg.epsilon_high}")
    if cfg.dual_clip is not None and cfg.dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (Ye et al. 2020), got {cfg.dual_clip}")
    if cfg.ratio_cap is not None and cfg.ratio_cap <= 0.0:
        raise ValueError(f"ratio_cap must be > 0, got {cfg.ratio_cap}")


def clipped_surrogate(
    coef_1: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, cfg: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """Ratio ``coef_1`` [B, T] or [B, 1], advantages [B, 1] or [B, T], mask [B, T] -> loss (broadcast shape)."""
    coef_2 = torch.clamp(coef_1, 1 - cfg.epsilon_low, 1 + cfg.epsilon_high)
    if cfg.ratio_cap is not None:
        coef_1 = torch.clamp(coef_1, max=cfg.ratio_cap)
    loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    metrics: dict[str, float] = {}
    if cfg.dual_clip is not None:
        cap = -cfg.dual_clip * advantages
        is_dual = (advantages < 0) & (loss > cap)
        loss = torch.where(advantages < 0, torch.min(loss, cap), loss)
        metrics["clip_ratio/dual_mean"] = masked_metric_mean(is_dual, mask)
    with torch.no_grad():
        is_low = (coef_1 < 1 - cfg.epsilon_low) & (advantages < 0)
        is_high = (coef_1 > 1 + cfg.epsilon_high) & (advantages > 0)
        metrics["clip_ratio/low_mean"] = masked_metric_mean(is_low, mask)
        metrics["clip_ratio/high_mean"] = masked_metric_mean(is_high, mask)
        metrics["clip_ratio/region_mean"] = masked_metric_mean(is_low | is_high, mask)
        metrics["clip_ratio/low_min"] = _per_seq_extreme(is_low, mask, largest=False)
        metrics["clip_ratio/high_max"] = _per_seq_extreme(is_high, mask, largest=True)
    return loss, metrics


def _per_seq_extreme(x: torch.Tensor, mask: torch.Tensor, largest: bool) -> float:
    """TRL's nanmin/nanmax over per-sequence masked means (sequences without tokens are skipped)."""
    x = x.float()
    if x.size(1) == 1:
        per_seq, valid = x.squeeze(1), torch.ones(x.size(0), dtype=torch.bool, device=x.device)
    else:
        m = mask.to(x.dtype)
        count = m.sum(-1)
        per_seq, valid = (x * m).sum(-1) / count.clamp(min=1.0), count > 0
    if not bool(valid.any()):
        return float("nan")
    vals = per_seq[valid]
    return float(vals.max() if largest else vals.min())


def describe_clip(cfg: Any, ratio: str) -> str:
    text = f"-min(r*A, clip(r, {1 - cfg.epsilon_low:g}, {1 + cfg.epsilon_high:g})*A), {ratio}"
    if cfg.ratio_cap is not None:
        text += f"; r capped at {cfg.ratio_cap:g} in the first term (two-sided clip)"
    if cfg.dual_clip is not None:
        text += f"; where A<0 the loss is capped at -{cfg.dual_clip:g}*A (dual clip)"
    return text


@LOSSES.register("clip")
class Clip(PolicyLoss):
    """PPO/GRPO clipped surrogate on the per-token ratio pi/pi_old (clip-higher, dual clip, two-sided cap)."""

    @dataclass(frozen=True)
    class Config:
        epsilon_low: Annotated[float, Range(ge=0, lt=1)] = 0.2  # lower clip: ratio >= 1 - epsilon_low
        # upper clip: ratio <= 1 + epsilon_high (DAPO clip-higher: 0.28)
        epsilon_high: Annotated[float, Range(ge=0)] = 0.2
        dual_clip: Annotated[float | None, Range(gt=1)] = None  # dual-clip PPO constant c > 1: loss <= -c*A where A < 0
        ratio_cap: Annotated[float | None, Range(gt=0)] = None  # TRL `delta`: cap the unclipped ratio before the min

        def __post_init__(self) -> None:
            check_clip_fields(self)

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps [B, T], advantages [B, 1] or [B, T] -> per-token loss [B, T], metrics."""
        log_ratio = x.logps - x.old_logps  # [B, T]
        advantages = as_2d(x.advantages)
        loss, metrics = clipped_surrogate(torch.exp(log_ratio), advantages, x.mask, self.cfg)
        return loss, {**metrics, **or_diagnostics(log_ratio, advantages, x.mask, *self.log_margins())}

    def activity(self, x: LossInputs, loss: torch.Tensor) -> float | None:
        """None at GRPO's settings (0.2/0.2, no dual clip, no cap): it is the no-op, and the share of tokens it clips
        is ``clip_ratio/region_mean``; other settings (clip_higher, dual clip, a cap) report the base's figure."""
        return None if self.cfg == self.Config() else super().activity(x, loss)

    def log_margins(self) -> tuple[float, float]:
        """The clip range in log-ratio space: (log(1 + eps_high), -log(1 - eps_low))."""
        eps_low = self.cfg.epsilon_low
        return math.log1p(self.cfg.epsilon_high), (-math.log1p(-eps_low) if eps_low < 1 else math.inf)

    def describe(self) -> str:
        return describe_clip(self.cfg, "r = pi/pi_old per token")
