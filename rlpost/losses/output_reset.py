"""``output_reset``: Output Reset (OR), the loss of PPO-OR / GRPO-OR (seed 000 #29).

The clipped surrogate is replaced by a smooth one-sided squared-margin loss on the rollout-relative
token log-ratio; the advantage sign sets the direction, and a token past the favourable margin has
zero residual (and zero gradient)::

    r    = logps - old_logps                        [B, T]  log pi_theta - log pi_rollout
    s    = sign(A)                                  [B, 1] or [B, T]  in {-1, 0, +1}
    m    = margin_high where A > 0, margin_low where A < 0
    e    = relu(m - s * r)                          OR residual (0 once s*r >= m)
    loss = |A| * e^2 / (2 m)                        (normalize=true; |A| * e^2 / 2 when false)

    d loss / d logps = -A * e / m                   = -A at r = 0, linearly down to 0 at the margin

Choices where the abstract is silent:
- ``|A|`` multiplies the squared residual: the sign gives the direction and the magnitude the
  strength, as in the clipped surrogate; the margin itself is the same for every token.
- The margin is a constant in log-ratio space (epsilon-like: ``margin_high=0.2`` sits near the clip's
  ``log(1.2) = 0.18``, ``margin_low=0.2`` near ``-log(0.8) = 0.22``), with separate values for the two
  directions, as ``epsilon_high`` / ``epsilon_low`` in ``clip``. Both must be > 0.
- ``normalize=true`` divides by ``2 m`` rather than 2, so at the rollout policy (r = 0) the gradient
  is exactly the policy gradient ``-A * grad log pi``: with ``num_iterations=1`` and no micro-batch
  lag GRPO-OR takes GRPO's first step, and learning rates transfer. Away from r = 0 the gradient
  decays linearly to zero at the margin, so the derivative of the objective is continuous there
  (the clipped surrogate's jumps from ``-A * ratio`` to 0). ``normalize=false`` is the bare
  ``|A| e^2 / 2`` (gradient ``m`` times smaller at r = 0).
- Unfavourable tokens (s*r < 0) keep a residual above m and a gradient above |A|, growing linearly:
  "one-sided" means only the favourable side saturates, like PPO's clip.
- ``A = 0``: no direction, so residual, loss and gradient are 0. Such tokens (e.g. GRPO groups
  with equal rewards) are left out of the ``or/*`` metrics except ``or/log_ratio_abs_mean``.
- The loss value is ``|A| m / 2`` at r = 0 (not 0 like the surrogate's advantage-free part); only its
  gradient and its decrease toward 0 carry meaning.
Metrics, masked token means over the directed tokens (mask and A != 0; 0.0 when there are none):
``or/residual_mean`` (mean e), ``or/overshoot_frac`` (fraction with s*r >= m, i.e. e = 0),
``or/log_ratio_displacement`` (mean s*r: how far tokens moved in their favoured direction);
``or/log_ratio_abs_mean`` is mean |r| over all masked tokens (comparable with any loss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d
from rlpost.losses.diagnostics import direction, or_diagnostics


@LOSSES.register("output_reset")
class OutputReset(PolicyLoss):
    """Output Reset: one-sided squared-margin loss on the token log-ratio, direction = sign(A)."""

    seed = "seed 000 #29"

    @dataclass(frozen=True)
    class Config:
        # favourable margin for A > 0: zero residual once log(pi/pi_old) >= margin_high
        margin_high: Annotated[float, Range(gt=0)] = 0.2
        # favourable margin for A < 0: zero residual once log(pi/pi_old) <= -margin_low
        margin_low: Annotated[float, Range(gt=0)] = 0.2
        normalize: bool = True  # divide by 2m (gradient -A at r = 0, the policy gradient) instead of 2

        def __post_init__(self) -> None:
            if self.margin_high <= 0 or self.margin_low <= 0:
                raise ValueError(f"margin_high and margin_low must be > 0, got {self.margin_high}, {self.margin_low}")

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps [B, T], advantages [B, 1] or [B, T] -> per-token loss [B, T], metrics."""
        cfg = self.cfg
        advantages = as_2d(x.advantages)
        log_ratio = x.logps - x.old_logps  # [B, T]
        sign, margin = direction(advantages, cfg.margin_high, cfg.margin_low)
        residual = torch.relu(margin - sign * log_ratio)  # [B, T]; A = 0 rows are zeroed by |A| below
        scale = 2.0 * margin if cfg.normalize else 2.0
        loss = advantages.abs() * residual.square() / scale
        return loss, or_diagnostics(log_ratio, advantages, x.mask, cfg.margin_high, cfg.margin_low)

    def describe(self) -> str:
        cfg = self.cfg
        denom = "(2m)" if cfg.normalize else "2"
        return (
            f"|A| * relu(m - sign(A)*r)^2 / {denom}, r = log pi - log pi_old per token, "
            f"m = {cfg.margin_high:g} (A>0) / {cfg.margin_low:g} (A<0); zero residual and gradient past m, 0 at A=0"
        )
