"""The combine base class and its registry: many reward columns -> one scalar reward per completion."""

from __future__ import annotations

import torch

from rlpost.component import Component
from rlpost.registry import Registry


class Combine(Component):
    """``reward_terms [N, R]`` and the term weights ``[R]`` -> rewards ``[N]`` and metrics.

    Combiners that need the group structure receive ``num_generations`` (G; rows g*G..g*G+G-1
    share a prompt). NaN marks a term that did not apply to a sample. Optional members
    (``check_run``, ``describe``, ``state_dict``, ...): ``Component``.
    """

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Reward matrix [N, R], weights [R], G -> rewards [N] and float metrics."""
        raise NotImplementedError


COMBINERS: Registry[Combine] = Registry("combine", Combine)
