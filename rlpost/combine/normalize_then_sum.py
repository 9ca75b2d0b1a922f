"""``normalize_then_sum``: each reward term normalized within its group, then summed, then batch-normalized.

TRL 1.16's ``multi_objective_aggregation="normalize_then_sum"``, the decoupled normalization of GDPO
("Group reward-Decoupled Normalization Policy Optimization", arXiv 2601.05242). With ``R [N, R]`` the
reward terms (NaN = the term did not score that completion), ``w [R]`` their weights and G the group::

    z_ik = (R_ik - mean_group R_k) / (std_group R_k + eps)     per term k, within the prompt's group (nan-aware)
    s_i  = sum_k w_k z_ik                                      NaN terms skipped; NaN if every term is NaN
    A_i  = (s_i - mean_batch s) / (std_batch s + eps)          over the whole generation batch (nan-aware)

so a term with a large spread cannot drown the others inside one shared group std, which TRL's default
``sum_then_normalize`` (``reward/combine=weighted_sum`` with ``algorithm/advantage=group_norm``) allows:
there the weighted sum is normalized per group. std is the unbiased (Bessel) nanstd, ``eps`` is added
to the std (TRL: 1e-4), and an unscorable row (every term NaN) gets advantage 0.

The output is an advantage (``produces``): it replaces ``algorithm/advantage`` (left at group_norm; any
other is refused before a model loads, ``rlpost/combine/base.py``). Choices exactly as TRL: a term
with fewer than two scorable values in a group contributes 0 to that group, the batch std of a single
completion is 0, and the logged reward (``score``) is the plain weighted sum of the terms. Metric:
``normalize_then_sum/sum_std`` (std_batch s, before the batch normalization).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from rlpost.advantages.base import nan_weighted_sum
from rlpost.advantages.group_norm import group_advantage, nanstd
from rlpost.combine.base import COMBINERS, Combine
from rlpost.core.schema import Range


@COMBINERS.register("normalize_then_sum")
class NormalizeThenSum(Combine):
    """GDPO / TRL normalize_then_sum: group-normalize each term, weighted sum, normalize over the batch."""

    produces = "advantages"
    multi_column = True  # one reward column: the weighted sum up to a factor (rlpost show warns)

    @dataclass(frozen=True)
    class Config:
        eps: Annotated[float, Range(ge=0)] = 1e-4  # added to each std before dividing (TRL: 1e-4)

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """reward_terms [N, R], weights [R], G -> advantages [N] (NaN = unscorable) and metrics."""
        eps = self.cfg.eps
        terms = reward_terms.float()
        z = torch.stack(  # [N, R]: each term's GRPO advantage within its group; NaN where the term is NaN
            [group_advantage(terms[:, k], num_generations, "group", eps) for k in range(terms.size(1))], dim=1
        )
        summed = nan_weighted_sum(z, weights.to(terms.device, torch.float32))  # [N]
        std = nanstd(summed) if summed.numel() > 1 else summed.new_zeros(())
        advantages = (summed - torch.nanmean(summed)) / (std + eps)
        return advantages, {"normalize_then_sum/sum_std": float(std)}

    def describe(self) -> str:
        e = f"{self.cfg.eps:g}"
        return (
            f"A = batch_norm(sum_k w_k z_k), z_k = (R_k - mean_group R_k) / (std_group R_k + {e}), "
            f"batch_norm(s) = (s - mean(s)) / (std(s) + {e}) over the generation batch (TRL normalize_then_sum)"
        )
