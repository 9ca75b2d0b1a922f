"""Importance-ratio guard (seed 000 #16): a bounded log-ratio before exponentiation.

The seed names "numerical overflow in importance ratios when using bfloat16" as a failure mode of
small models and guards the ratio. Every ratio-based loss here computes ``exp(logps - old_logps)``
(clip, gspo, cispo, output_reset, sapo, vespo, luspo, gmpo, the AIR regularizer), so the guard
rewrites the loss inputs once instead of touching each loss::

    d       = logps - old_logps                          [B, T]
    d_g     = clamp(d, -c, c)
    old'    = logps - d_g          so that   logps - old' = d_g   (value and gradient)

Choices where the abstract is silent:
- the clamp is a true clamp: a guarded token's ratio is exp(+-c) and its gradient through the ratio
  is 0 (as PPO's clip and verl's ``clamp(log_ratio, -20, 20)``); a straight-through variant would
  scale the gradient by exp(c) instead.
- ``old'`` carries the gradient of ``logps`` (it is ``logps - d_g``); every loss and regularizer
  here reads ``old_logps`` only through the difference ``logps - old_logps``.
- GSPO averages the guarded per-token log-ratios, so its sequence ratio is bounded by exp(c) too.
- ``c`` (``max_log_ratio``) defaults to 20 (exp(20) ~ 4.9e8, far below bf16/fp32 overflow); on-policy
  steps (num_iterations=1) have d = 0 and the guard never bites.
Metric ``safety/ratio_guarded``: the count of loss tokens whose |d| > c (summed over the micro-batch).
"""

from __future__ import annotations

from dataclasses import replace

from rlpost.losses.base import LossInputs


def guard_log_ratio(x: LossInputs, max_log_ratio: float) -> tuple[LossInputs, dict[str, float]]:
    """LossInputs with ``logps - old_logps`` clamped to [-c, c]; metrics: guarded token count."""
    d = x.logps - x.old_logps  # [B, T]
    guarded = d.clamp(-max_log_ratio, max_log_ratio)
    count = ((d.detach().abs() > max_log_ratio).float() * x.mask).sum().item()
    return replace(x, old_logps=x.logps - guarded), {"safety/ratio_guarded": count}
