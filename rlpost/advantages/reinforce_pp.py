"""``reinforce_pp``: REINFORCE++ (Hu et al. 2025, arXiv 2501.03262): a global, batch-normalized advantage.

REINFORCE++ drops the critic and the per-prompt std of GRPO: the return of a completion is normalized
over the whole batch. For an outcome reward ``r`` [N] (NaN = unscorable) and ``m`` the loss mask::

    s_i = r_i                                    baseline: none   REINFORCE++ (verl reinforce_plus_plus,
                                                                  OpenRLHF advantage_estimator=reinforce)
    s_i = r_i - mean_{j in group(i)} r_j         baseline: group  REINFORCE++-baseline (verl
                                                                  reinforce_plus_plus_baseline, OpenRLHF
                                                                  reinforce_baseline)
    A_i = (s_i - mu) / sqrt(var + 1e-8)          mu, var over every counted token of the batch:
        mu  = sum_i n_i s_i / sum_i n_i          n_i = sum_t m_it (a completion weighs by its token count)
        var = sum_i n_i (s_i - mu)^2 / (sum_i n_i - 1)     (unbiased: verl's masked_whiten)

i.e. the per-token return ``s_i`` (the outcome reward propagates unchanged to every token with gamma 1)
whitened over the batch's tokens exactly as verl's ``masked_whiten``, and the advantage is one value
per completion ``[N]`` (each of its tokens carries it).

Choices where the sources are silent or differ:
- The variant is verl's (the REINFORCE++ paper's "global batch normalization"): token-weighted mean and
  unbiased variance with 1e-8 inside the square root. OpenRLHF's normalization differs only in using the
  biased variance (and a clamp instead of the epsilon).
- A KL penalty is not part of this advantage: REINFORCE++ puts the k1 KL in each token's reward; in
  rlpost put it in the reward (``algorithm.kl.placement=reward``, the sequence sum of the per-token KL,
  which is the t = 0 return of the paper's token rewards with gamma 1) or in the loss.
- Unscorable (NaN) rewards get advantage 0 and are left out of the group mean, mu and var; a group
  whose scorable rewards are all one value gets ``s = 0`` (baseline: group). Completions with no
  counted token (a dropped group, an episode of tool output) weigh 0 in mu and var.
- ``batch`` is the generation batch over all processes (verl's training batch).
Metrics: ``advantage/{mean,std,abs_mean}`` and ``reinforce_pp/return_std`` (sqrt(var) before whitening).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from rlpost.advantages.base import ADVANTAGES, Advantage, GroupBatch, advantage_metrics


def batch_whiten(returns: torch.Tensor, weights: torch.Tensor, eps: float = 1e-8) -> tuple[torch.Tensor, float]:
    """returns [N], token counts [N] -> ((s - mu) / sqrt(var + eps) [N], sqrt(var)): token-weighted mean, unbiased var."""
    count = weights.sum()
    mean = (returns * weights).sum() / count.clamp(min=1.0)
    var = ((returns - mean) ** 2 * weights).sum() / (count - 1).clamp(min=1.0)
    return (returns - mean) * torch.rsqrt(var + eps), float(var.sqrt())


@ADVANTAGES.register("reinforce_pp")
class ReinforcePP(Advantage):
    """REINFORCE++: the reward (minus the group mean with baseline=group) whitened over the batch's tokens."""

    @dataclass(frozen=True)
    class Config:
        # none: REINFORCE++ (the reward itself) | group: REINFORCE++-baseline (minus the prompt's group mean)
        baseline: Literal["none", "group"] = "none"

        def __post_init__(self) -> None:
            if self.baseline not in ("none", "group"):
                raise ValueError(f"Unknown baseline {self.baseline!r}. Valid choices: none, group.")

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """rewards [N] (NaN = unscorable), completion_mask [N, T], G -> advantages [N], metrics."""
        rewards = batch.rewards.float()
        scorable = ~torch.isnan(rewards)
        returns = rewards
        if self.cfg.baseline == "group":
            means = torch.nanmean(batch.grouped(rewards), dim=1)  # [N/G]
            returns = rewards - means.repeat_interleave(batch.num_generations)
        weights = batch.completion_mask.float().sum(-1) * scorable  # [N] counted tokens; 0 for NaN rewards
        advantages, return_std = batch_whiten(returns.nan_to_num(0.0), weights)
        advantages = advantages.masked_fill(~scorable, 0.0)
        return advantages, {**advantage_metrics(advantages), "reinforce_pp/return_std": return_std}

    def describe(self) -> str:
        s = "r - mean_group(r)" if self.cfg.baseline == "group" else "r"
        return (
            f"A = (s - mu) / sqrt(var + 1e-8), s = {s}; mu, var (unbiased) over every counted token of the batch "
            "(REINFORCE++" + ("-baseline)" if self.cfg.baseline == "group" else ")")
        )
