"""weighted_sum: the scalar reward is the weighted sum of the reward terms (TRL's own combination).

``r_n = sum_j w_j * R[n, j]`` over the terms that scored sample ``n``: a NaN term (the reward
returned ``None``) contributes nothing, as in TRL's ``nansum``. A row where every term is NaN is
unscorable and stays NaN (TRL 1.16's convention: excluded from the group baseline, advantage 0),
unless ``nan_as_zero`` asks for the older behaviour of scoring it 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlpost.combine.base import COMBINERS, Combine


@COMBINERS.register("weighted_sum")
class WeightedSum(Combine):
    """Weighted sum of the reward terms; NaN terms are skipped, all-NaN rows stay NaN."""

    @dataclass(frozen=True)
    class Config:
        nan_as_zero: bool = False  # score an all-NaN (unscorable) row 0 instead of NaN

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``reward_terms [N, R]``, ``weights [R]`` -> rewards ``[N]`` and metrics.

        ``num_generations`` is unused: a weighted sum needs no group structure.
        """
        if reward_terms.dim() != 2 or weights.shape != (reward_terms.shape[1],):
            raise ValueError(
                f"weighted_sum needs terms [N, R] and weights [R], got {tuple(reward_terms.shape)} "
                f"and {tuple(weights.shape)}"
            )
        weights = weights.to(reward_terms.device, reward_terms.dtype)
        rewards = (reward_terms * weights.unsqueeze(0)).nansum(dim=1)  # [N]
        unscorable = torch.isnan(reward_terms).all(dim=1)  # [N]
        if not self.cfg.nan_as_zero:
            rewards = rewards.masked_fill(unscorable, float("nan"))
        frac = unscorable.float().mean().item() if len(unscorable) else 0.0
        return rewards, {"unscorable_frac": frac}

    def activity(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int, output: torch.Tensor
    ) -> float | None:
        """None: the weighted sum is the no-op itself; with ``nan_as_zero`` (unscorable rows scored 0, not left
        out) the base's figure."""
        return super().activity(reward_terms, weights, num_generations, output) if self.cfg.nan_as_zero else None
