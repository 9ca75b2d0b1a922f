"""Per-reward-term GRPO advantages, shared by the token-level estimators (routed, segments).

``term_advantages(batch, base)`` applies a ``GroupNorm`` to each column of ``batch.reward_terms``
[N, R] on its own (same NaN rules and std as group_norm.py) and multiplies it by the term's weight:
a term's advantage is ``w_j * GroupNorm(R[:, j])``, so the reward weights keep their meaning when
terms are routed to different tokens. ``weights`` come from the built run (``check_run``).
"""

from __future__ import annotations

import dataclasses

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.group_norm import GroupNorm


def term_advantages(batch: GroupBatch, base: GroupNorm, weights: torch.Tensor | None) -> torch.Tensor:
    """reward_terms [N, R] -> [N, R]: column j is w_j * GroupNorm(R[:, j]) (w = 1 when weights is None)."""
    cols = []
    for j in range(batch.reward_terms.size(1)):
        column = batch.reward_terms[:, j].float()
        cols.append(base(dataclasses.replace(batch, rewards=column))[0])
    out = torch.stack(cols, dim=1)
    return out if weights is None else out * weights.to(out.device, out.dtype).unsqueeze(0)
