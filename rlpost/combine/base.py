"""The combine Protocol and its registry: many reward columns -> one scalar reward per completion."""

from __future__ import annotations

from typing import Protocol

import torch

from rlpost.registry import Registry


class Combine(Protocol):
    """``reward_terms [N, R]`` and the term weights ``[R]`` -> rewards ``[N]`` and metrics.

    Combiners that need the group structure receive ``num_generations`` (G; rows g*G..g*G+G-1
    share a prompt). NaN marks a term that did not apply to a sample.
    """

    Config: type

    def __call__(
        self, reward_terms: torch.Tensor, weights: torch.Tensor, num_generations: int
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


COMBINERS: Registry[Combine] = Registry("combine")
