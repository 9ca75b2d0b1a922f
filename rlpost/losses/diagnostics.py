"""Output Reset's log-ratio diagnostics (seed 000 #29), shared by ``output_reset`` and ``clip``.

Both losses log them so that a GRPO baseline and a GRPO-OR run plot on the same axes; ``clip`` uses
its equivalent margins in log-ratio space, ``log(1 + epsilon_high)`` and ``-log(1 - epsilon_low)``.
"""

from __future__ import annotations

import torch


def or_diagnostics(
    log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, margin_high: float, margin_low: float
) -> dict[str, float]:
    """The ``or/*`` metrics of the log-ratio [B, T] for advantages [B, 1] or [B, T], mask [B, T]."""
    with torch.no_grad():
        sign, margin = direction(advantages, margin_high, margin_low)
        sr = sign * log_ratio.detach()  # [B, T]
        residual = torch.relu(margin - sr) * (sign != 0)
        mask = mask.to(sr.dtype)
        directed = mask * (sign != 0).to(sr.dtype).expand_as(mask)  # [B, T]
        count = directed.sum().clamp(min=1.0)
        return {
            "or/residual_mean": float((residual * directed).sum() / count),
            "or/overshoot_frac": float(((sr >= margin).to(sr.dtype) * directed).sum() / count),
            "or/log_ratio_displacement": float((sr * directed).sum() / count),
            "or/log_ratio_abs_mean": float((log_ratio.detach().abs() * mask).sum() / mask.sum().clamp(min=1.0)),
        }


def direction(advantages: torch.Tensor, margin_high: float, margin_low: float) -> tuple[torch.Tensor, torch.Tensor]:
    """sign(A) and the margin of that direction (margin_high where A > 0, else margin_low)."""
    sign = torch.sign(advantages)
    margin = torch.where(advantages > 0, advantages.new_tensor(margin_high), advantages.new_tensor(margin_low))
    return sign, margin
