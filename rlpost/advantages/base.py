"""The advantage base class, its registry, and the typed group batch every estimator reads.

Shapes: N = number of completions in the generation batch (prompts x G), G = completions per
prompt, R = reward terms, T = completion length (padded). Rows ``g*G .. g*G+G-1`` share a prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry


@dataclass
class GroupBatch:
    """What an advantage estimator may read about one generation batch."""

    rewards: torch.Tensor  # [N] combined scalar reward (after `combine`)
    reward_terms: torch.Tensor  # [N, R] each reward term, unweighted
    term_names: list[str]
    num_generations: int  # G
    completion_mask: torch.Tensor  # [N, T] 1.0 on completion tokens that count
    completion_ids: torch.Tensor  # [N, T]
    rows: list[dict[str, Any]] = field(default_factory=list)  # the dataset row of each completion
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # optional [N, T] tensors (e.g. entropies)
    # [N][T] decoded piece of each token (requires={"token_text"})
    token_text: list[list[str]] = field(default_factory=list)

    @property
    def num_groups(self) -> int:
        return self.rewards.numel() // self.num_generations

    def grouped(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [N / G, G, ...]."""
        return x.view(self.num_groups, self.num_generations, *x.shape[1:])


@dataclass
class Estimate:
    """An advantage estimator's result: ``advantages`` [N] or [N, T], float metrics, named by-products."""

    advantages: torch.Tensor
    metrics: dict[str, float]
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. {"returns": [N, T]} (GAE)


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    """advantages [N] -> ``advantage/mean``, ``advantage/std`` (unbiased, 0 if N = 1), ``advantage/abs_mean``."""
    return {
        "advantage/mean": float(advantages.mean()),
        "advantage/std": float(advantages.std()) if advantages.numel() > 1 else 0.0,
        "advantage/abs_mean": float(advantages.abs().mean()),
    }


class Advantage(Component):
    """Maps a group batch to advantages: [N] (one per completion) or [N, T] (per token).

    Optional members (``requires``, ``check_run``, ``describe``, ``state_dict``, ...): ``Component``.
    """

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Group batch -> advantages [N] or [N, T], and float metrics."""
        raise NotImplementedError

    def estimate(self, batch: GroupBatch) -> Estimate:
        """What the pipeline (rlpost/pipeline.py, step 3.5) calls: the advantages, metrics and any by-products
        the trainer needs (GAE's value targets ``returns`` [N, T]); by default ``self(batch)`` and none."""
        advantages, metrics = self(batch)
        return Estimate(advantages, metrics)


ADVANTAGES: Registry[Advantage] = Registry("advantage", Advantage)


def term_index(names: list[str], name: str, where: str) -> int:
    """Position of reward term ``name`` in ``names`` [R]; ConfigError naming ``where`` otherwise."""
    if name not in names:
        raise ConfigError(f"{where}={name!r} is not a reward term of this run. Reward terms: {', '.join(names)}.")
    return names.index(name)


def nan_weighted_sum(terms: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """terms [N, R], weights [R] -> [N]: sum_j w_j R[:, j] over non-NaN terms; NaN where all are NaN."""
    total = (terms * weights.to(terms.device, terms.dtype).unsqueeze(0)).nansum(dim=1)
    return total.masked_fill(torch.isnan(terms).all(dim=1), float("nan"))
