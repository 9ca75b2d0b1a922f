"""``group_norm``: group-relative advantages (GRPO, Dr. GRPO, RLOO, batch-std "PPO Lite").

For the G completions of one prompt, with rewards r (NaN = unscorable)::

    baseline_i = nanmean_group(r)                          (default)
               = (sum_{j valid} r_j - r_i) / (n_valid - 1)  (leave_one_out: RLOO, mean of the others)
    A_i        = (r_i - baseline_i) / (std + eps)           std = unbiased nanstd of the group ("group"),
                                                            of the whole batch ("batch"), or no division ("none")

This is TRL 1.16 ``_generate_and_score_completions`` (multi_objective_aggregation="sum_then_normalize")
exactly: nanmean/nanstd with Bessel's correction, ``eps=1e-4`` added to the std (not to the variance),
the mean always per group (also with ``scale="batch"``, TRL's PPO-Lite reading), std 0 when G = 1
(resp. N = 1 for "batch"), and every NaN advantage set to 0 at the end.

Choices:
- Unscorable (NaN) rewards are excluded from the baseline and the std and get advantage 0; a group
  with fewer than 2 scorable rewards gets NaN std and so advantage 0 everywhere (as TRL).
- ``leave_one_out`` changes only the baseline; with ``scale="group"`` it is still divided by the
  group std (RLOO proper is ``scale="none"``). Note A_rloo = n/(n-1) * (r - mean). A group with one
  scorable reward has no "others": its advantage is 0.
- ``scale="none"`` is Dr. GRPO (seed 004 #19): no std division (the question-difficulty bias).
- Metric ``frac_reward_zero_std``: fraction of groups whose scorable rewards have zero (or undefined,
  fewer than two scorable) std, always per group, whatever ``scale`` is (TRL logs the batch std's
  flag under "batch"). Advantage mean/std/abs-mean are over all N rows (std unbiased, 0 if N = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch, Scale, advantage_metrics, group_relative
from rlpost.advantages.base import nanstd as nanstd  # re-exported: its callers import it from here
from rlpost.core.schema import Range


def group_advantage(values: torch.Tensor, g: int, scale: Scale = "group", eps: float = 1e-4) -> torch.Tensor:
    """values [N] (NaN = unscorable), G -> GRPO advantage [N] per group (``GroupNorm``'s numbers: an undefined
    advantage is 0), except that unscorable rows stay NaN, so an estimator after ``combine`` (odrpo, rdpo,
    decoupled) or a per-span advantage still sees them as unscorable."""
    values = values.float()
    advantages = torch.nan_to_num(group_relative(values, g, scale, eps=eps)[0], nan=0.0)
    return advantages.masked_fill(torch.isnan(values), float("nan"))


@ADVANTAGES.register("group_norm")
class GroupNorm(Advantage):
    """Group-relative advantage: reward minus the group mean (or leave-one-out mean), over the std."""

    @dataclass(frozen=True)
    class Config:
        scale: Scale = "group"  # divide by the group std, batch std, or not at all
        leave_one_out: bool = False  # RLOO baseline: mean of the other G-1 rewards of the group
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to the std before dividing (TRL: 1e-4)

        def __post_init__(self) -> None:
            if self.scale not in ("group", "batch", "none"):
                raise ValueError(f"Unknown scale {self.scale!r}. Valid choices: group, batch, none.")
            if self.eps < 0:
                raise ValueError(f"eps must be >= 0, got {self.eps}")

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N] (NaN = unscorable), G = batch.num_generations -> advantages [N], metrics."""
        cfg = self.cfg
        raw, group_std = group_relative(batch.rewards, batch.num_generations, cfg.scale, cfg.leave_one_out, cfg.eps)
        advantages = torch.nan_to_num(raw, nan=0.0)
        zero_std = torch.isnan(group_std) | torch.isclose(group_std, torch.zeros_like(group_std))
        metrics = {**advantage_metrics(advantages), "frac_reward_zero_std": float(zero_std.float().mean())}
        return advantages, metrics

    def activity(self, batch: GroupBatch, advantages: torch.Tensor) -> float | None:
        """None with GRPO's settings (scale=group, no leave-one-out, eps=1e-4): it is the no-op, and how many rows
        it pushes is ``1 - frac_reward_zero_std``; other settings (group_center, rloo, batch) report the base's."""
        return None if self.cfg == self.Config() else super().activity(batch, advantages)

    def describe(self) -> str:
        base = "mean of the other G-1 rewards" if self.cfg.leave_one_out else "mean_group(r)"
        if self.cfg.scale == "none":
            return f"A = r - {base}"
        return f"A = (r - {base}) / (std_{self.cfg.scale}(r) + {self.cfg.eps:g}), std unbiased, NaN rewards -> A = 0"
