"""``gspo``: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071).

The importance ratio is defined per sequence, as the geometric mean of the token ratios over the
completion tokens, and the clipped surrogate is applied once per sequence::

    log s  = sum_t (logps - old_logps) * m / max(sum_t m, 1)     [B, 1]
    s      = exp(log s)
    loss   = -min(s * A, clamp(s, 1 - epsilon_low, 1 + epsilon_high) * A)     [B, 1] ([B, T] if A is)

This is exactly TRL 1.16 ``importance_sampling_level="sequence"``; with the ``seq-mean-token-mean``
aggregation (TRL ``loss_type="grpo"``) it reproduces the GSPO paper, which TRL recommends. With a
token-sum aggregation each sequence is weighted by its length instead (TRL warns about this).

Choices:
- Defaults ``epsilon_low=3e-4``, ``epsilon_high=4e-4`` are the paper's clipping range (the sequence
  ratio is a length-normalized mean, so it moves far less than token ratios).
- ``ratio_cap`` / ``dual_clip`` are offered as for ``clip`` (same code path), default off.
- The gradient flows through every token of ``log s`` (TRL's form, equal to the paper's GSPO
  gradient for sequence-level advantages); the GSPO-token variant is not implemented here.
- Clip-fraction metrics are means over sequences (TRL's logging for ``[B, 1]`` tensors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.core.schema import Range
from rlpost.losses.base import LOSSES, LossInputs, PolicyLoss
from rlpost.losses.clip import as_2d, check_clip_fields, clipped_surrogate, describe_clip


def sequence_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] log-probs and mask -> [B, 1] masked mean of the token log-ratios."""
    mask = mask.to(logps.dtype)
    return (((logps - old_logps) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)


@LOSSES.register("gspo")
class GSPO(PolicyLoss):
    """GSPO: clipped surrogate on the sequence-level (length-normalized) importance ratio."""

    @dataclass(frozen=True)
    class Config:
        # lower clip of the sequence ratio: s >= 1 - epsilon_low
        epsilon_low: Annotated[float, Range(ge=0, lt=1)] = 3e-4
        epsilon_high: Annotated[float, Range(ge=0)] = 4e-4  # upper clip of the sequence ratio: s <= 1 + epsilon_high
        dual_clip: Annotated[float | None, Range(gt=1)] = None  # dual-clip constant c > 1 for A < 0 (off by default)
        # cap the unclipped sequence ratio before the min (off by default)
        ratio_cap: Annotated[float | None, Range(gt=0)] = None

        def __post_init__(self) -> None:
            check_clip_fields(self)

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """logps, old_logps, mask [B, T], advantages [B, 1] -> loss [B, 1] (broadcast over tokens), metrics."""
        coef_1 = torch.exp(sequence_log_ratio(x.logps, x.old_logps, x.mask))  # [B, 1]
        return clipped_surrogate(coef_1, as_2d(x.advantages), x.mask, self.cfg)

    def describe(self) -> str:
        return describe_clip(self.cfg, "r = exp(mean_t log(pi/pi_old)) per sequence")
