"""Helpers of the combiners that return group-centred advantages (odrpo, rdpo, decoupled).

``group_advantage`` is group_norm.py's ``GroupNorm`` applied to one column ``[N]`` (same NaN rules,
Bessel-corrected std, ``eps`` on the std), except that unscorable (NaN) rows stay NaN, so the
advantage estimator after ``combine`` still sees them as unscorable. ``term_index`` resolves a
reward term name against the built run's term names with a ``ConfigError`` listing the names.
"""

from __future__ import annotations

from typing import Literal

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.core.errors import ConfigError


def group_advantage(
    values: torch.Tensor, g: int, scale: Literal["group", "batch", "none"] = "group", eps: float = 1e-4
) -> torch.Tensor:
    """values [N] (NaN = unscorable), G -> GRPO advantage [N] per group; NaN rows stay NaN."""
    values = values.float()
    n = values.numel()
    batch = GroupBatch(
        rewards=values,
        reward_terms=values[:, None],
        term_names=["value"],
        num_generations=g,
        completion_mask=values.new_ones(n, 1),
        completion_ids=torch.zeros(n, 1, dtype=torch.long, device=values.device),
    )
    advantages, _ = GroupNorm(GroupNorm.Config(scale=scale, eps=eps))(batch)
    return advantages.masked_fill(torch.isnan(values), float("nan"))


def term_index(names: list[str], name: str, where: str) -> int:
    """Position of reward term ``name`` in ``names`` [R]; ConfigError naming ``where`` otherwise."""
    if name not in names:
        raise ConfigError(f"{where}={name!r} is not a reward term of this run. Reward terms: {', '.join(names)}.")
    return names.index(name)


def nan_weighted_sum(terms: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """terms [N, R], weights [R] -> [N]: sum_j w_j R[:, j] over non-NaN terms; NaN where all are NaN."""
    total = (terms * weights.to(terms.device, terms.dtype).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(torch.isnan(terms).all(dim=1), float("nan"))
