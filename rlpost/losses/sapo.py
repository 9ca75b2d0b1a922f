"""``sapo``: Soft Adaptive Policy Optimization (SAPO, arXiv 2511.20347; TRL 1.16 ``loss_type="sapo"``).

The hard clip of the ratio is replaced by a smooth sigmoid gate, with a temperature per advantage
sign; the gate's slope is the weight each token's policy gradient gets::

    r    = exp(logps - old_logps)                          [B, T]
    tau  = temperature_pos where A > 0, temperature_neg where A <= 0
    f(r) = sigmoid(tau * (r - 1)) * 4 / tau
    loss = -f(r) * A                                       [B, T]

    d loss / d logps = -A * r * 4 * s * (1 - s),   s = sigmoid(tau * (r - 1))

so at r = 1 the gradient is the policy gradient ``-A`` (s = 1/2), and it decays smoothly to 0 as r
leaves 1 in either direction, faster for a larger tau (no band where it is exactly 0, unlike
``clip``). The loss value at r = 1 is ``-2A / tau``, not 0: only its gradient carries meaning.

Choices:
- Defaults are TRL's (``sapo_temperature_pos=1.0``, ``sapo_temperature_neg=1.05``, the paper's
  setting): a slightly steeper gate for negative advantages, whose large-ratio tokens the paper
  found destabilizing. Both must be > 0 (TRL divides by them without a check).
- ``A = 0`` takes ``temperature_neg`` (TRL's ``A > 0`` test); its loss and gradient are 0 either way.
- Token-level ratio, as TRL's default ``importance_sampling_level="token"``. TRL aggregates sapo as
  ``grpo`` (the ``seq-mean-token-mean`` aggregation, the ``sapo`` bundle's).
Metric ``sapo/gate_mean``: masked token mean of ``4 s (1 - s)``, the gradient's attenuation
(1.0 on-policy, -> 0 far off-policy); TRL logs no sapo metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.aggregation import masked_metric_mean
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d


@LOSSES.register("sapo")
class SAPO(PolicyLoss):
    """SAPO: a sigmoid gate on the token ratio, temperature by advantage sign, in place of the hard clip."""

    @dataclass(frozen=True)
    class Config:
        # gate temperature for A > 0 (TRL sapo_temperature_pos): larger = the gradient fades faster off-policy
        temperature_pos: Annotated[float, Range(gt=0)] = 1.0
        # gate temperature for A <= 0 (TRL sapo_temperature_neg)
        temperature_neg: Annotated[float, Range(gt=0)] = 1.05

        def __post_init__(self) -> None:
            if self.temperature_pos <= 0 or self.temperature_neg <= 0:
                raise ValueError(
                    f"temperature_pos and temperature_neg must be > 0, got {self.temperature_pos}, "
                    f"{self.temperature_neg}"
                )

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps [B, T], advantages [B, 1] or [B, T] -> per-token loss [B, T], metrics."""
        advantages = as_2d(x.advantages)
        ratio = torch.exp(x.logps - x.old_logps)  # [B, T]
        tau = ratio.new_full(advantages.shape, self.cfg.temperature_neg).masked_fill(
            advantages > 0, self.cfg.temperature_pos
        )
        gate = torch.sigmoid(tau * (ratio - 1))  # [B, T]
        loss = -(gate * 4 / tau) * advantages
        with torch.no_grad():
            metrics = {"sapo/gate_mean": masked_metric_mean(4 * gate * (1 - gate), x.mask)}
        return loss, metrics

    def describe(self) -> str:
        cfg = self.cfg
        return (
            f"-s*4/tau * A, s = sigmoid(tau*(r-1)), r = pi/pi_old per token, tau = {cfg.temperature_pos:g} (A>0) / "
            f"{cfg.temperature_neg:g} (A<=0); gradient -A*r*4s(1-s): -A at r=1, smoothly -> 0 off-policy"
        )
